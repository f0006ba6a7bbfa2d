"""A re-send of an event built in code (``numbers_normalised=False``) whose data the
planner normalises (an integral float, -0.0) is a duplicate, as any exact re-send is:
it was compared, as sent, with what was stored normalised, and refused as an
``IdConflict`` (the same event twice in one batch too)."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.store.append.group_commit import Appender
from app.store.records import NewEvent


@pytest.mark.parametrize("plan_ahead", [True, False])
async def test_a_re_send_of_an_event_built_in_code_is_a_duplicate(
    engine: AsyncEngine, plan_ahead: bool
) -> None:
    appender = Appender(engine, plan_ahead=plan_ahead)
    try:
        event = NewEvent(
            id="decision-1", source="/s", type="t", stream="s", has_data=True,
            data={"backoff_s": 2.0, "score": -0.0},
        )  # fmt: skip
        [first] = await appender.append("acme", [event])
        [again] = await appender.append("acme", [event])  # the same event, sent again
    finally:
        await appender.close()
    assert (again.duplicate, again.position) == (True, first.position)


async def test_the_same_event_twice_in_one_batch_is_one_event(engine: AsyncEngine) -> None:
    appender = Appender(engine)
    try:
        event = NewEvent(
            id="decision-2", source="/s", type="t", stream="s", has_data=True, data={"n": 1.0}
        )
        [first, second] = await appender.append("acme", [event, event])
    finally:
        await appender.close()
    assert (second.duplicate, second.position) == (True, first.position)
