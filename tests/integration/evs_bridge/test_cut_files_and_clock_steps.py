"""The bridge with a recording cut mid-word (it was taken as whole: the stray bytes
dropped without a word) and a live session whose Unix clock steps back (every event
after the step was late, lumped into one segment; and a session started after it took
an earlier session's key, whose ids the store refused as conflicts or took as
duplicates)."""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from sqlalchemy import URL

from evs_bridge import packet_stream
from evs_bridge.events import EVENT_DTYPE, ClockDomain
from evs_bridge.mqtt import Broker, MqttBridge, encode_packet
from evs_bridge.output import NdjsonSink, Output, StoreSink
from evs_bridge.spool import Spool
from ingest.client import CausewayClient
from tests.integration.evs_bridge.test_bridge import Store as BridgeStore
from tests.integration.evs_bridge.test_bridge import bridge_cli
from tests.integration.process import create_key, environment, serving


@pytest.fixture
def store(database_url: URL, tmp_path: Path) -> Iterator[Store]:
    url = database_url.render_as_string(hide_password=False)
    env = environment(CAUSEWAY_DATABASE_URL=url, CAUSEWAY_DATA_DIR=str(tmp_path / "data"))
    key = create_key(env, "edge", "ingest,read")
    reader = create_key(env, "edge", "read")
    with serving(env) as base:
        yield Store(base, key, reader)


@dataclass(frozen=True, slots=True)
class Store(BridgeStore):
    reader: str


_HEADER = b"% evt 3.0\n% geometry 1280x720\n% end\n"
_T0 = 1_764_500_000_000_000  # 2025-11-30, unix µs


def _evt3_words(count: int) -> bytes:
    """TIME_HIGH, TIME_LOW, then ``count`` ADDR_Y/ADDR_X pairs, each a CD event."""
    words = [0x8000 | 1, 0x6000 | 5]
    for k in range(count):
        words += [0x0000 | (k % 700), 0x2000 | (k % 1200)]
    return struct.pack(f"<{len(words)}H", *words)


class TestTruncatedRaw:
    def test_a_raw_file_cut_mid_word_is_one_line_and_exit_2(self, tmp_path: Path) -> None:
        cut = tmp_path / "cut.raw"
        cut.write_bytes(_HEADER + _evt3_words(50) + b"\x07")  # the last word lost a byte
        out = tmp_path / "events.ndjson"
        result = bridge_cli("replay", str(cut), "--sensor", "s1", "--out", str(out), cwd=tmp_path)
        assert result.returncode == 2, (result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("error: ")
        assert "mid-word" in lines[0]
        assert "cut.raw" in lines[0]
        assert not out.exists()  # nothing written for a file that is not whole

    def test_inspect_says_the_same_of_a_cut_raw_file(self, tmp_path: Path) -> None:
        cut = tmp_path / "cut.raw"
        cut.write_bytes(_HEADER + _evt3_words(50) + b"\x07")
        result = bridge_cli("inspect", str(cut), cwd=tmp_path)
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert result.stderr.startswith("error: ")
        assert "mid-word" in result.stderr

    def test_a_whole_raw_file_still_replays(self, tmp_path: Path) -> None:
        whole = tmp_path / "whole.raw"
        whole.write_bytes(_HEADER + _evt3_words(50))
        out = tmp_path / "events.ndjson"
        result = bridge_cli("replay", str(whole), "--sensor", "s1", "--out", str(out), cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "50 events" in result.stdout


def _packet(sequence: int, start_us: int, *, x: int, clock: ClockDomain) -> bytes:
    """A dense 20x20 blob at (x, 100) for 10 ms from ``start_us``: 2000 events."""
    rng = np.random.default_rng(sequence)
    events = np.zeros(2000, dtype=EVENT_DTYPE)
    events["x"] = rng.integers(x, x + 20, 2000)
    events["y"] = rng.integers(100, 120, 2000)
    events["t"] = np.sort(rng.integers(start_us, start_us + 10_000, 2000))
    return encode_packet(events, width=320, height=240, sequence=sequence, clock=clock)


def _written(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in buffer.getvalue().splitlines()]


class TestUnixClockStepsBack:
    def test_a_live_unix_clock_that_steps_back_is_a_new_session_not_one_lump(self) -> None:
        # A publisher stamps events with its machine's unix clock; NTP steps it back 10 s.
        buffer = io.StringIO()
        bridge = MqttBridge(Broker("127.0.0.1", 1), "sensors/x", "s1", Output(NdjsonSink(buffer)))
        sequence = 0
        for k in range(100):  # 1 s at x=100
            bridge.submit(_packet(sequence, _T0 + k * 10_000, x=100, clock=ClockDomain.UNIX))
            sequence += 1
        for k in range(300):  # then 3 s more, after the step back, at x=200
            start = _T0 - 10_000_000 + k * 10_000
            bridge.submit(_packet(sequence, start, x=200, clock=ClockDomain.UNIX))
            sequence += 1
        bridge.stop()
        events = _written(buffer)
        segments = [e for e in events if e["type"] == "evs.segment.recorded"]
        # No segment swallows seconds of data: each holds at most its own 100 ms.
        assert max(e["data"]["events"]["in"] for e in segments) <= 10 * 2000
        assert sum(e["data"]["events"]["in"] for e in segments) >= 400 * 2000 - 8
        after = [
            e for e in events
            if e["type"] == "evs.activity.detected" and e["data"]["bbox"]["x"] >= 180
        ]  # fmt: skip
        assert len(after) >= 100  # the 3 s after the step are detected window by window
        assert bridge.stats.restarts == 1
        ids = [e["id"] for e in events]
        assert len(set(ids)) == len(ids)


class _SteppingClock:
    """``datetime`` whose ``now`` is the test's to set: the machine's clock."""

    at = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)

    @classmethod
    def now(cls, _tz: Any = None) -> datetime:
        return cls.at


def test_a_session_after_the_clock_steps_back_never_reuses_an_earlier_sessions_ids(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(packet_stream, "datetime", _SteppingClock)
    start = _SteppingClock.at
    with CausewayClient(store.base, store.key) as client:
        output = Output(StoreSink(client), Spool(tmp_path / "spool"))
        bridge = MqttBridge(Broker("127.0.0.1", 1), "sensors/x", "gate", output)

        def session(x: int) -> None:
            # The sensor restarts: sequence and sensor time from 0.
            for k in range(30):
                bridge.submit(_packet(k, k * 10_000, x=x, clock=ClockDomain.SENSOR))
            while not bridge._queue.empty():  # processed here: the bridge is not started
                bridge._stream.take(bridge._queue.get())

        _SteppingClock.at = start
        session(100)
        _SteppingClock.at = start + timedelta(seconds=1)
        session(150)
        _SteppingClock.at = start  # the clock steps back one second
        session(200)
        bridge.stop()
    assert bridge.stats.restarts == 2
    assert output.stats.rejected == 0, "a later session's events were refused as 409s"
    stored = store.fetch_events(source="evs://gate")
    sessions = {e["id"].split(":")[2] for e in stored}
    assert len(sessions) == 3
