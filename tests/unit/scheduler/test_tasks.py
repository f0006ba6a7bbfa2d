"""The task fold and the failure policy: backoff, dead-lettering by class."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from scheduler import tasks as t

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def created(**route: object) -> t.TaskState:
    spec = {
        "id": "r", "kind": "k", "queue": "q", "max_retries": 3, "backoff_base_s": 1.0,
        "service": None, "on_model_mismatch": "propose",
        "requires": {"numbers": {}, "flags": [], "labels": {}}, **route,
    }  # fmt: skip
    event = t.created(
        tenant="acme", task_id="t1", route=spec, priority=5,
        trigger={"id": "e1", "type": "x", "source": "/s", "time": NOW.isoformat()},
        debounce_key=None, at=NOW,
    )  # fmt: skip
    return t.fold(None, event.type, event.data, 10)


class TestBackoff:
    def test_the_default_retries_wait_one_two_and_four_seconds(self) -> None:
        assert [t.retry_delay_s(1.0, n, 0.0) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]
        assert t.retry_delay_s(1.0, 3, 0.25) == 5.0

    def test_the_longest_wait_is_a_day_and_its_jitter_however_many_retries(self) -> None:
        # A route may allow 100 retries of a 1 h base: 2**99 hours would overflow a date.
        assert t.retry_delay_s(3600.0, 100, 0.0) == t.MAX_RETRY_DELAY_S
        # The jitter stretches the capped wait too: capped retries do not all come at once.
        delay = t.retry_delay_s(3600.0, 100, 0.25)
        assert delay == t.MAX_RETRY_DELAY_S * 1.25
        state = replace(created(max_retries=100, backoff_base_s=3600.0), attempts=100)
        kind, data = t.after_failure(state, "transient", "x", at=NOW, jitter=0.25)
        assert kind == t.RETRIED
        assert datetime.fromisoformat(data["retry_at"]) - NOW == timedelta(days=1.25)

    def test_a_task_runs_at_most_one_plus_max_retries_times(self) -> None:
        state = created()
        outcomes = []
        for attempt in range(1, 5):
            state = replace(state, attempts=attempt)
            kind, data = t.after_failure(state, "transient", "x", at=NOW, jitter=0.0)
            outcomes.append(kind)
            if kind == t.RETRIED:
                retry_at = datetime.fromisoformat(data["retry_at"])
                assert retry_at - NOW == timedelta(seconds=2 ** (attempt - 1))
        assert outcomes == [t.RETRIED, t.RETRIED, t.RETRIED, t.DEAD_LETTERED]


class TestDisposition:
    @pytest.mark.parametrize(
        ("error_class", "service", "policy", "expected"),
        [
            ("data_invalid", None, "propose", t.ARCHIVED),
            ("model_version_mismatch", "gate", "propose", t.ROLLBACK_PROPOSED),
            ("model_version_mismatch", "gate", "rollback", t.ROLLED_BACK),
            ("model_version_mismatch", None, "rollback", t.FLAGGED),
            ("transient", "gate", "rollback", t.FLAGGED),
            ("unknown", None, "propose", t.FLAGGED),
        ],
    )
    def test_each_class_has_its_handling(
        self, error_class: str, service: str | None, policy: str, expected: str
    ) -> None:
        state = created(service=service, on_model_mismatch=policy)
        assert t.disposition_for(state, error_class) == expected


class TestFold:
    def test_decisions_chain_on_the_task_stream(self) -> None:
        state = created()
        leased = t.decision(state, t.LEASED, {"lease": "l", "worker": "w", "attempt": 1,
                            "expires_at": NOW.isoformat()}, at=NOW)  # fmt: skip
        assert leased.causes == (t.decision_id("t1", 1),)
        assert (leased.id, leased.expected_version) == (t.decision_id("t1", 2), 1)
        after = t.fold(state, leased.type, leased.data, 11)
        assert (after.state, after.attempts, after.worker, after.version) == ("leased", 1, "w", 2)

    def test_an_event_for_an_unknown_task_is_an_error(self) -> None:
        with pytest.raises(ValueError, match="never created"):
            t.fold(None, t.LEASED, {"task_id": "x"}, 1)
