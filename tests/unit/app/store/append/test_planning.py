"""Planning a group: a request of one event takes a shorter path than a request of
several, and must come out exactly as the full path would have planned it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from app.errors import AppError
from app.store.append.planning import GroupPlan
from app.store.chain import GENESIS_HASH
from app.store.model_registry import Signature, registration_event
from app.store.records import Appended, NewEvent

AT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
SIGNATURE = Signature.model_validate({"inputs": [{"type": "binary"}], "outputs": []})


def new(event_id: str, stream: str = "s", **fields: Any) -> NewEvent:
    return NewEvent(id=event_id, source="/s", type="t", stream=stream, **fields)


class FullPathOnly(GroupPlan):
    """A group that plans every request the way it plans a request of several events."""

    def _accept_alone(self, tenant: str, event: NewEvent) -> list[Appended] | None:
        return None


def planned(kind: type[GroupPlan], requests: list[NewEvent]) -> tuple[Any, ...]:
    group = kind(3, b"\x07" * 32, {}, {("acme", "old"): 2}, {("acme", "s"): 4}, AT, {})
    outcomes = []
    for event in requests:
        outcome = group.plan("acme", [event])
        outcomes.append(
            (type(outcome).__name__, outcome.detail) if isinstance(outcome, AppError) else outcome
        )
    return (
        outcomes,
        group.rows,
        group.edges,
        group.known,
        group.positions,
        group.versions,
        group.registrations,
        (group.position, group.prev_hash),
    )


REGISTRATION = registration_event("m", "1", SIGNATURE, {}, enforce_outputs=False)
SCENARIOS = {
    "plain events": [new("a"), new("b", "other", data={"n": 1}, has_data=True)],
    "causes known before and within the group": [
        new("a"),
        new("b", causes=("old", "a")),
        new("c", causes=("a", "a")),
    ],
    "a re-send and a conflict within the group": [new("a"), new("a"), new("a", "other")],
    "an unknown cause": [new("a", causes=("nowhere",)), new("b")],
    "expected versions": [new("a", expected_version=4), new("b", expected_version=4)],
    "a model registered, then named": [
        REGISTRATION,
        new("a", model_name="m", model_version="1"),
        new("b", model_name="m", model_version="2"),
    ],
    "numbers to normalise, built in code or read by ingest": [
        new("a", data={"x": 1.0}, has_data=True),
        new("b", data={"x": 2}, has_data=True, numbers_normalised=True),
    ],
    "numbers that cannot be stored": [new("a", data={"x": 2.0**60}, has_data=True), new("b")],
}


@pytest.mark.parametrize("requests", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_a_request_of_one_event_is_planned_as_the_full_path_plans_it(
    requests: list[NewEvent],
) -> None:
    assert planned(GroupPlan, requests) == planned(FullPathOnly, requests)


def test_the_first_event_of_a_group_links_to_the_head_it_was_planned_on() -> None:
    group = GroupPlan(0, GENESIS_HASH, {}, {}, {}, AT, {})
    outcome = group.plan("acme", [new("a")])
    assert isinstance(outcome, list)
    assert (outcome[0].position, group.rows[0].prev_hash) == (1, GENESIS_HASH)
