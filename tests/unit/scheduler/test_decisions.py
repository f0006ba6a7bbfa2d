"""What the queue's commands decide, without a database: lease bands, held leases,
extensions, retried completions, the input a dead letter keeps, and rollbacks."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from app.errors import Conflict, LeaseLost, NotFound
from app.store.decision_reads import CausedEffect, EventContent, LoggedEntry
from app.store.records import NewEvent
from scheduler import decisions as d
from scheduler import tasks as t
from scheduler.placement import OffPeak, WorkerProfile
from tests.unit.scheduler.test_tasks import NOW, created


def leased(state: t.TaskState, *, expires: datetime) -> t.TaskState:
    data = {"lease": "l1", "worker": "w1", "attempt": 1, "expires_at": expires.isoformat()}
    event = t.decision(state, t.LEASED, data, at=NOW)
    return t.fold(state, event.type, event.data, state.position + 1)


def result(event_id: str) -> NewEvent:
    return NewEvent(
        id=event_id, source="/w", type="r", stream="s", time=NOW.isoformat(), time_value=NOW
    )


class TestLeaseBand:
    def test_spot_workers_never_get_guaranteed_work(self) -> None:
        spot = WorkerProfile.parse("w", {}, spot=True, labels={})
        assert d.lease_band(spot, None, NOW) == (0, 7)

    def test_off_peak_keeps_low_priorities_for_spot_workers(self) -> None:
        worker = WorkerProfile.parse("w", {}, spot=False, labels={})
        always = OffPeak.parse("0-24", 3)
        assert d.lease_band(worker, always, NOW) == (4, 9)
        assert d.lease_band(worker, None, NOW) == (0, 9)


class TestHolding:
    def test_a_lease_held_and_running_is_returned(self) -> None:
        state = leased(created(), expires=NOW + timedelta(seconds=30))
        assert d.holding(state, state.id, "l1", NOW) is state

    def test_another_lease_or_an_expired_one_is_lost(self) -> None:
        state = leased(created(), expires=NOW + timedelta(seconds=30))
        with pytest.raises(LeaseLost, match="under another lease"):
            d.holding(state, state.id, "l2", NOW)
        with pytest.raises(LeaseLost, match="the lease expired"):
            d.holding(state, state.id, "l1", NOW + timedelta(minutes=1))

    def test_no_task_is_not_found(self) -> None:
        with pytest.raises(NotFound):
            d.holding(None, "t1", "l1", NOW)

    def test_only_a_dead_letter_is_requeued_or_discarded(self) -> None:
        with pytest.raises(Conflict, match="not dead-lettered"):
            d.dead_letter(created(), "t1")


class TestExtension:
    def test_the_grant_is_the_last_lease_or_extension(self) -> None:
        data = {"at": NOW.isoformat(), "expires_at": (NOW + timedelta(seconds=90)).isoformat()}
        assert d.granted_s(LoggedEntry(t.LEASED, 1, NOW.isoformat(), data)) == 90.0
        assert d.granted_s(LoggedEntry(t.LEASED, 1, NOW.isoformat(), {"at": None})) is None
        assert d.granted_s(None) is None

    def test_a_heartbeat_never_shortens_a_lease(self) -> None:
        state = leased(created(), expires=NOW + timedelta(seconds=60))
        expires = d.extended_expiry(state, lease_s=10, max_lease_s=600, now=NOW)
        assert expires == NOW + timedelta(seconds=60)
        longer = d.extended_expiry(state, lease_s=900, max_lease_s=600, now=NOW)
        assert longer == NOW + timedelta(seconds=600)


class TestCompletion:
    def test_results_are_caused_by_the_trigger_once(self) -> None:
        state = created()
        caused = d.caused_by_trigger(state, [replace(result("a"), causes=("e1", "x"))])
        assert caused[0].causes == ("e1", "x")
        done = d.completion(state, "l1", [*caused, *caused], at=NOW)
        assert done.causes.count("a") == 1  # a result sent twice causes it once
        assert done.data["results"] == ["a", "a"]

    @pytest.mark.parametrize("trigger_state", ["t=trigger", None])
    def test_a_result_carries_its_triggers_trace_context_whole(
        self, trigger_state: str | None
    ) -> None:
        """A result with a tracestate of its own and no traceparent kept that tracestate
        beside the trigger's traceparent when the trigger had none: a pair of two traces."""
        state = created()
        own = replace(result("a"), extensions={"tracestate": "r=result"})
        traces = {state.trigger_id: (f"00-{'1' * 32}-{'2' * 16}-01", trigger_state)}
        [carried] = d.caused_by_trigger(state, [own], traces)
        expected = {"traceparent": f"00-{'1' * 32}-{'2' * 16}-01"}
        if trigger_state is not None:
            expected["tracestate"] = trigger_state
        assert carried.extensions == expected

    def test_a_retry_must_send_the_same_results(self) -> None:
        state = created()
        d.check_same_results(state, {"results": ["a"]}, [result("a")])
        with pytest.raises(Conflict, match="other results \\('a'\\)"):
            d.check_same_results(state, {"results": ["a"]}, [result("b")])

    def test_only_a_completion_is_read_as_one(self) -> None:
        entry = LoggedEntry(t.COMPLETED, 1, NOW.isoformat(), {"lease": "l1"})
        assert d.completed_data(entry) == {"lease": "l1"}
        assert d.completed_data(replace(entry, type=t.RETRIED)) is None


class TestFailure:
    def test_an_expired_lease_retries_at_once(self) -> None:
        kind, data = d.failure(created(), "transient", "x", at=NOW, jitter=0.0, retry_now=True)
        assert kind == t.RETRIED
        assert (data["delay_s"], data["retry_at"]) == (0.0, NOW.isoformat())

    def test_binary_input_is_kept_as_base64(self) -> None:
        content = EventContent("x", "/s", "application/octet-stream", None, b"\x00\x01")
        kept = d.archived_input("e1", content)
        assert kept == {
            "id": "e1", "type": "x", "source": "/s",
            "datacontenttype": "application/octet-stream", "data_base64": "AAE=",
        }  # fmt: skip
        assert d.archived_input("e1", None) is None

    def test_only_rollbacks_of_the_tasks_own_dead_letters_count(self) -> None:
        effects = [
            CausedEffect({"disposition": t.ROLLED_BACK}, 5),
            CausedEffect({"disposition": t.FLAGGED}, 9),
            CausedEffect({"disposition": t.ROLLED_BACK}, 7),
        ]
        assert d.own_rollback(effects) == 7
        assert d.own_rollback([]) is None


class TestDebounceWindow:
    def test_a_window_at_the_ends_of_time_is_held_to_them(self) -> None:
        start = datetime.min.replace(tzinfo=UTC) + timedelta(seconds=1)
        after, before = d.debounce_window(start, 60)
        assert after == datetime.min.replace(tzinfo=UTC)
        assert before == start + timedelta(seconds=60)
