"""Delivery: red at once, green lazily, order kept, the spool when the store is away,
rejects kept, nothing dropped without a count."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest

from evs_bridge.channels import Delivery
from evs_bridge.output import (
    NdjsonSink,
    Output,
    OutputConfig,
    StoreRefused,
    StoreUnavailable,
)
from evs_bridge.spool import REJECTED_FILE, Spool
from ingest.client import CausewayError

Event = dict[str, Any]


class FakeStore:
    """Stands in for the HTTP store: atomic batches, causes must exist, idempotent ids."""

    def __init__(self) -> None:
        self.stored: list[Event] = []
        self.requests = 0
        self.is_down = False
        self.refused_ids: set[str] = set()
        self.status = 0
        self.problem: dict[str, Any] = {"type": "/problems/unauthenticated", "detail": "no"}

    def send(self, events: list[Event]) -> int:
        self.requests += 1
        if self.is_down:
            raise StoreUnavailable("connection refused")
        if self.status:
            raise CausewayError(self.status, self.problem)
        known = {e["id"] for e in self.stored}
        duplicates = 0
        accepted: list[Event] = []
        for event in events:
            if event["id"] in self.refused_ids:
                raise CausewayError(
                    422, {"type": "/problems/invalid-event", "detail": f"{event['id']} is invalid"}
                )
            causes = [c for c in event.get("causationid", "").split(",") if c]
            if any(c not in known for c in causes):
                raise CausewayError(
                    422, {"type": "/problems/unknown-cause", "detail": "unknown cause"}
                )
            if event["id"] in known:
                duplicates += 1
                continue
            known.add(event["id"])
            accepted.append(event)
        self.stored += accepted
        return duplicates

    @property
    def ids(self) -> list[str]:
        return [e["id"] for e in self.stored]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def event(name: str, cause: str | None = None) -> Event:
    built: Event = {"id": name, "data": {}}
    if cause:
        built["causationid"] = cause
    return built


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def output(store: FakeStore, clock: Clock, spool: Spool | None, **config: Any) -> Output:
    return Output(store, spool, OutputConfig(**config), clock=clock, sleep=clock.sleep)


class TestDelivery:
    def test_red_goes_at_once_taking_what_was_queued_before_it(
        self, store: FakeStore, clock: Clock, tmp_path: Path
    ) -> None:
        out = output(store, clock, Spool(tmp_path))
        out.put(event("seg"), Delivery.LAZY)
        assert store.ids == []
        out.put(event("face", "seg"), Delivery.IMMEDIATE)
        assert store.ids == ["seg", "face"]
        assert store.requests == 1

    def test_green_waits_for_the_lazy_interval(
        self, store: FakeStore, clock: Clock, tmp_path: Path
    ) -> None:
        out = output(store, clock, Spool(tmp_path), lazy_interval_s=2.0)
        out.put(event("a"), Delivery.LAZY)
        clock.now = 1.0
        out.put(event("b"), Delivery.LAZY)
        clock.now = 1.9
        out.poll()
        assert store.ids == []
        clock.now = 2.0
        out.poll()
        assert store.ids == ["a", "b"]

    def test_yellow_goes_sooner_than_green(
        self, store: FakeStore, clock: Clock, tmp_path: Path
    ) -> None:
        out = output(store, clock, Spool(tmp_path), soon_interval_s=0.5)
        out.put(event("a"), Delivery.LAZY)
        out.put(event("car"), Delivery.SOON)
        clock.now = 0.5
        out.poll()
        assert store.ids == ["a", "car"]

    def test_a_full_batch_goes_at_once(
        self, store: FakeStore, clock: Clock, tmp_path: Path
    ) -> None:
        out = output(store, clock, Spool(tmp_path), max_batch_events=3)
        for name in "abc":
            out.put(event(name), Delivery.LAZY)
        assert store.ids == ["a", "b", "c"]


class TestStoreAway:
    def test_events_wait_in_the_spool_and_arrive_once_in_order(
        self, store: FakeStore, clock: Clock, tmp_path: Path
    ) -> None:
        out = output(store, clock, Spool(tmp_path), retry_min_s=1.0)
        store.is_down = True
        out.put(event("seg1"), Delivery.LAZY)
        out.put(event("face1", "seg1"), Delivery.IMMEDIATE)
        assert (out.is_down, out.stats.spooled) == (True, 2)
        clock.now = 0.5
        out.put(event("face2", "seg1"), Delivery.IMMEDIATE)  # behind the spool, not before
        store.is_down = False
        out.put(event("face3", "seg1"), Delivery.IMMEDIATE)
        assert store.ids == []  # the retry is not due yet
        clock.now = 1.0
        out.poll()
        assert store.ids == ["seg1", "face1", "face2", "face3"]
        assert not out.is_down
        out.put(event("face4", "seg1"), Delivery.IMMEDIATE)
        assert store.ids[-1] == "face4"

    def test_the_spool_survives_the_bridge(
        self, store: FakeStore, clock: Clock, tmp_path: Path
    ) -> None:
        store.is_down = True
        first = output(store, clock, Spool(tmp_path))
        first.put(event("a"), Delivery.IMMEDIATE)
        first.close()
        store.is_down = False
        second = output(store, clock, Spool(tmp_path))
        second.put(event("b"), Delivery.IMMEDIATE)
        assert store.ids == ["a", "b"]

    def test_close_retries_the_spool_for_its_timeout(
        self, store: FakeStore, clock: Clock, tmp_path: Path
    ) -> None:
        out = output(store, clock, Spool(tmp_path), retry_min_s=1.0)
        store.is_down = True
        out.put(event("a"), Delivery.IMMEDIATE)
        store.is_down = False
        out.close(drain_timeout_s=5.0)
        assert store.ids == ["a"]

    def test_without_a_spool_unavailability_is_raised(self, store: FakeStore, clock: Clock) -> None:
        store.is_down = True
        with pytest.raises(StoreUnavailable):
            output(store, clock, None).put(event("a"), Delivery.IMMEDIATE)

    def test_a_full_spool_on_live_input_drops_counts_and_says_so(
        self,
        store: FakeStore,
        clock: Clock,
        tmp_path: Path,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        out = output(store, clock, Spool(tmp_path, max_bytes=40), on_full="drop")
        store.is_down = True
        out.put(event("a"), Delivery.IMMEDIATE)
        with caplog.at_level(logging.WARNING):
            out.put(event("b"), Delivery.IMMEDIATE)
            out.put(event("c"), Delivery.IMMEDIATE)
        assert out.stats.dropped == 2
        assert "dropped 1 events (2 dropped so far)" in caplog.text

    def test_a_full_spool_on_file_input_waits_for_the_store(
        self, store: FakeStore, clock: Clock, tmp_path: Path
    ) -> None:
        def come_back(seconds: float) -> None:
            clock.now += seconds
            store.is_down = False  # the store returns while the reader waits

        out = Output(
            store,
            Spool(tmp_path, max_bytes=40),
            OutputConfig(on_full="wait"),
            clock=clock,
            sleep=come_back,
        )
        store.is_down = True
        out.put(event("a"), Delivery.IMMEDIATE)
        out.put(event("b"), Delivery.IMMEDIATE)
        assert store.ids == ["a", "b"]
        assert out.stats.dropped == 0


class TestRefusals:
    def test_a_refused_event_is_kept_and_the_rest_still_stored(
        self,
        store: FakeStore,
        clock: Clock,
        tmp_path: Path,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        store.refused_ids = {"bad"}
        out = output(store, clock, Spool(tmp_path))
        with caplog.at_level(logging.ERROR):
            out.put(event("seg"), Delivery.LAZY)
            out.put(event("bad"), Delivery.LAZY)
            out.put(event("child", "bad"), Delivery.LAZY)
            out.put(event("face", "seg"), Delivery.IMMEDIATE)
        assert store.ids == ["seg", "face"]
        assert out.stats.rejected == 2
        rejected = [
            orjson.loads(line) for line in (tmp_path / REJECTED_FILE).read_bytes().splitlines()
        ]
        assert [(r["status"], r["event"]["id"]) for r in rejected] == [
            (422, "bad"),
            (422, "child"),
        ]
        assert "store rejected event bad" in caplog.text

    def test_a_refused_key_stops_the_bridge_and_keeps_the_events(
        self, store: FakeStore, clock: Clock, tmp_path: Path
    ) -> None:
        store.status = 401
        spool = Spool(tmp_path)
        out = output(store, clock, spool)
        out.put(event("a"), Delivery.IMMEDIATE)  # not raised in the pipeline's emission...
        out.put(event("b"), Delivery.IMMEDIATE)  # ...whose rest goes to the spool, untried
        assert store.requests == 1
        with pytest.raises(StoreRefused):
            out.poll()  # ...but by what the bridge's loop calls next
        assert [e["id"] for e in spool.read_batch(10).events] == ["a", "b"]
        out.poll()  # raised once: the owner holds the output and stops

    @pytest.mark.parametrize(
        ("status", "problem"),
        [
            (404, {"type": "about:blank", "title": "Not Found", "detail": "no route"}),
            (405, {"detail": "Method Not Allowed"}),
            (400, {"detail": "<html>bad request</html>"}),
        ],
    )
    def test_a_target_that_is_no_causeway_stops_the_bridge(
        self,
        store: FakeStore,
        clock: Clock,
        tmp_path: Path,
        status: int,
        problem: dict[str, Any],
    ) -> None:
        store.status, store.problem = status, problem
        spool = Spool(tmp_path)
        out = output(store, clock, spool)
        out.put(event("a"), Delivery.IMMEDIATE)
        with pytest.raises(StoreRefused, match="--target"):
            out.close()
        assert out.stats.rejected == 0
        assert [e["id"] for e in spool.read_batch(10).events] == ["a"]

    def test_rejects_past_the_cap_are_counted(
        self, store: FakeStore, clock: Clock, tmp_path: Path
    ) -> None:
        store.refused_ids = {"bad0", "bad1", "bad2"}
        out = output(store, clock, Spool(tmp_path, max_rejected_bytes=150))
        for i in range(3):
            out.put(event(f"bad{i}"), Delivery.IMMEDIATE)
        assert (out.stats.rejected, out.stats.rejected_not_kept) == (3, 2)
        assert len((tmp_path / REJECTED_FILE).read_bytes().splitlines()) == 1

    def test_a_held_output_only_spools(
        self, store: FakeStore, clock: Clock, tmp_path: Path
    ) -> None:
        spool = Spool(tmp_path)
        out = output(store, clock, spool)
        out.hold()
        out.put(event("a"), Delivery.IMMEDIATE)
        out.close(drain_timeout_s=5)
        assert store.requests == 0
        with Spool(tmp_path) as reopened:
            assert [e["id"] for e in reopened.read_batch(10).events] == ["a"]

    def test_an_exact_resend_counts_as_a_duplicate(
        self, store: FakeStore, clock: Clock, tmp_path: Path
    ) -> None:
        out = output(store, clock, Spool(tmp_path))
        out.put(event("a"), Delivery.IMMEDIATE)
        out.put(event("a"), Delivery.IMMEDIATE)
        assert (out.stats.sent, out.stats.duplicates, store.ids) == (2, 1, ["a"])


def test_ndjson_sink_writes_one_event_a_line() -> None:
    buffer = io.StringIO()
    out = Output(NdjsonSink(buffer))
    out.put(event("a"), Delivery.LAZY)
    out.put(event("b", "a"), Delivery.LAZY)
    out.close()
    assert [orjson.loads(line)["id"] for line in buffer.getvalue().splitlines()] == ["a", "b"]
