"""Reads of the log for the scheduler's decisions, against PostgreSQL: a stream in
order, its last entry of some types, events by id, and what a stream's events caused."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy.ext.asyncio import AsyncEngine

from app.store import decision_reads as log
from app.store.log import EventLog
from app.store.records import NewEvent


def decision(event_id: str, kind: str, stream: str, **data: object) -> NewEvent:
    return NewEvent(id=event_id, source="/s", type=kind, stream=stream, has_data=True, data=data)


async def test_a_stream_reads_in_order_and_by_its_last_entry_of_a_type(
    engine: AsyncEngine,
) -> None:
    async with engine.begin() as conn:
        await EventLog(conn).append(
            "acme",
            [
                decision("a1", "leased", "task-a", n=1),
                decision("b1", "leased", "task-b", n=1),
                decision("a2", "extended", "task-a", n=2),
                decision("a3", "completed", "task-a", n=3),
            ],
        )
    async with engine.connect() as conn:
        stream = await log.read_stream(conn, "acme", "task-a")
        assert [(e.type, e.data) for e in stream] == [
            ("leased", {"n": 1}), ("extended", {"n": 2}), ("completed", {"n": 3}),
        ]  # fmt: skip
        last = await log.read_last(conn, "acme", "task-a", types=("leased", "extended"))
        assert last is not None
        assert (last.type, last.data) == ("extended", {"n": 2})
        assert (await log.read_last(conn, "acme", "task-a")) == stream[-1]
        assert await log.read_last(conn, "globex", "task-a") is None  # nothing crosses tenants
        assert await log.has_event(conn, "acme", "b1")
        assert not await log.has_event(conn, "globex", "b1")
        entry = await log.read_entry(conn, "acme", "a3")
        assert entry == stream[-1]
        content = await log.read_content(conn, "acme", "a1")
        assert content is not None
        assert (content.type, content.source, content.data) == ("leased", "/s", {"n": 1})


async def test_the_effects_of_a_streams_events_name_their_causes_data(
    engine: AsyncEngine,
) -> None:
    async with engine.begin() as conn:
        await EventLog(conn).append(
            "acme",
            [
                decision("d1", "dead", "task-a", disposition="rolled_back"),
                decision("r1", "rolled_back", "svc"),
                decision("d2", "dead", "task-b", disposition="rolled_back"),
            ],
        )
        rollback = replace(decision("r2", "rolled_back", "svc"), causes=("d1",))
        await EventLog(conn).append("acme", [rollback])
    async with engine.connect() as conn:
        effects = await log.read_effects(
            conn, "acme", "task-a", cause_type="dead", effect_type="rolled_back"
        )
        assert [(e.cause_data, e.effect_stream_version) for e in effects] == [
            ({"disposition": "rolled_back"}, 2)
        ]
        assert await log.read_checkpoint(conn, "no-such-projection") is None
