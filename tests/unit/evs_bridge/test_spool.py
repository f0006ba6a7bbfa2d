"""The on-disk spool: order, durability across reopening, torn tails, bounds, rejects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from evs_bridge.spool import (
    CURSOR_FILE,
    REJECTED_FILE,
    Spool,
    SpoolBusy,
    SpoolCorrupt,
    SpoolFull,
)


def events(start: int, count: int) -> list[dict[str, Any]]:
    return [{"id": f"e{i}", "data": {"n": i}} for i in range(start, start + count)]


def drain(spool: Spool, size: int = 3) -> list[str]:
    ids: list[str] = []
    while True:
        batch = spool.read_batch(size)
        if not batch.events:
            return ids
        ids += [e["id"] for e in batch.events]
        spool.commit(batch.cursors[-1])


class TestSpool:
    def test_events_come_back_in_order_once(self, tmp_path: Path) -> None:
        spool = Spool(tmp_path)
        spool.append(events(0, 5))
        spool.append(events(5, 5))
        assert drain(spool) == [f"e{i}" for i in range(10)]
        assert spool.is_empty
        assert drain(spool) == []

    def test_reading_without_commit_consumes_nothing(self, tmp_path: Path) -> None:
        spool = Spool(tmp_path)
        spool.append(events(0, 4))
        spool.read_batch(2)
        assert [e["id"] for e in spool.read_batch(10).events] == ["e0", "e1", "e2", "e3"]

    def test_a_reopened_spool_resumes_after_the_last_commit(self, tmp_path: Path) -> None:
        spool = Spool(tmp_path)
        spool.append(events(0, 6))
        batch = spool.read_batch(4)
        spool.commit(batch.cursors[1])
        spool.close()
        assert drain(Spool(tmp_path)) == ["e2", "e3", "e4", "e5"]
        assert (tmp_path / CURSOR_FILE).exists()

    def test_a_torn_last_line_is_cut_off_on_open(self, tmp_path: Path) -> None:
        spool = Spool(tmp_path)
        spool.append(events(0, 2))
        [segment] = tmp_path.glob("spool-*.ndjson")
        with segment.open("ab") as file:
            file.write(b'{"id": "torn')
        spool.close()
        reopened = Spool(tmp_path)
        reopened.append(events(2, 1))
        assert drain(reopened) == ["e0", "e1", "e2"]

    def test_a_changed_line_is_named_not_a_crash(self, tmp_path: Path) -> None:
        spool = Spool(tmp_path)
        spool.append(events(0, 3))
        [segment] = tmp_path.glob("spool-*.ndjson")
        lines = segment.read_bytes().splitlines(keepends=True)
        segment.write_bytes(lines[0] + b"this is not json\n" + lines[2])
        with pytest.raises(SpoolCorrupt, match=f"{segment.name}: the line at byte {len(lines[0])}"):
            spool.read_batch(10)

    def test_it_is_bounded(self, tmp_path: Path) -> None:
        spool = Spool(tmp_path, max_bytes=100)
        spool.append(events(0, 3))
        with pytest.raises(SpoolFull, match="100-byte limit"):
            spool.append(events(3, 3))
        drain(spool)
        spool.append(events(3, 3))

    def test_an_empty_spool_takes_one_batch_over_the_limit(self, tmp_path: Path) -> None:
        spool = Spool(tmp_path, max_bytes=10)
        spool.append(events(0, 3))
        assert spool.pending_bytes > 10

    def test_segments_rotate_and_sent_ones_are_deleted(self, tmp_path: Path) -> None:
        spool = Spool(tmp_path, segment_bytes=60)
        for start in range(0, 12, 2):
            spool.append(events(start, 2))
        assert len(list(tmp_path.glob("spool-*.ndjson"))) > 2
        assert drain(spool, size=5) == [f"e{i}" for i in range(12)]
        assert len(list(tmp_path.glob("spool-*.ndjson"))) == 1
        spool.append(events(12, 1))
        spool.close()
        assert drain(Spool(tmp_path, segment_bytes=60)) == ["e12"]

    def test_a_rejected_event_is_kept_with_the_answer(self, tmp_path: Path) -> None:
        spool = Spool(tmp_path)
        spool.reject({"id": "bad"}, 422, {"detail": "unknown cause ids: x"})
        [line] = (tmp_path / REJECTED_FILE).read_bytes().splitlines()
        assert orjson.loads(line) == {
            "status": 422,
            "problem": {"detail": "unknown cause ids: x"},
            "event": {"id": "bad"},
        }
        assert spool.is_empty

    def test_a_torn_rejected_line_is_cut_off_on_open(self, tmp_path: Path) -> None:
        spool = Spool(tmp_path)
        spool.reject({"id": "first"}, 422, {"detail": "x"})
        spool.close()
        with (tmp_path / REJECTED_FILE).open("ab") as file:
            file.write(b'{"status": 422, "prob')  # a crash mid-append
        reopened = Spool(tmp_path)
        reopened.reject({"id": "second"}, 422, {"detail": "y"})
        lines = (tmp_path / REJECTED_FILE).read_bytes().splitlines()
        assert [orjson.loads(line)["event"]["id"] for line in lines] == ["first", "second"]

    def test_rejects_stop_being_written_at_the_cap(self, tmp_path: Path) -> None:
        spool = Spool(tmp_path, max_rejected_bytes=200)
        kept = [spool.reject({"id": f"bad{i}"}, 422, {"detail": "no"}) for i in range(5)]
        assert kept == [True, True, True, False, False]
        assert (tmp_path / REJECTED_FILE).stat().st_size <= 200


class TestLock:
    def test_a_second_opener_is_refused_until_the_first_closes(self, tmp_path: Path) -> None:
        first = Spool(tmp_path)
        with pytest.raises(SpoolBusy, match="in use"):
            Spool(tmp_path)
        first.close()
        with Spool(tmp_path) as second:
            second.append(events(0, 1))
        Spool(tmp_path).close()
