"""A planned group written onto a head that other writers moved (``write_shared``): where
its events land, their stream versions and causal edges, and a hash chain that still
verifies, against PostgreSQL itself."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import driver_of
from app.store.append.planning import GroupPlan, Head
from app.store.append.writes import HeadMoved, MovedGroup, write_shared
from app.store.chain import GENESIS_HASH
from app.store.log import EventLog
from app.store.records import NewEvent
from app.store.verify import verify_chain

# Data that holds the keys the splice looks for, nested and inside strings alike.
TRICKY = {"position": 7, "streamversion": {"position": 1}, "s": '"position":9,"streamversion":9'}


def new(event_id: str, stream: str = "s", **fields: Any) -> NewEvent:
    return NewEvent(id=event_id, source="/s", type="t", stream=stream, **fields)


def planned_on(after: Head, versions: dict[str, int], *events: NewEvent) -> GroupPlan:
    """A group planned on ``after``, the streams at ``versions``, for one request (the
    event "a", if any is cited, is at position 1)."""
    group = GroupPlan(
        after.position,
        after.hash,
        {},
        {("acme", "a"): 1},
        {("acme", stream): v for stream, v in versions.items()},
        datetime.now(UTC),
        {},
        keep_canonical=True,
    )
    assert isinstance(group.plan("acme", events), list)
    return group


@asynccontextmanager
async def autocommit(engine: AsyncEngine) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        yield await driver_of(conn)


async def append(engine: AsyncEngine, *events: NewEvent) -> Head:
    async with engine.begin() as conn:
        appended = await EventLog(conn).append("acme", events)
        row = (
            await conn.execute(text("SELECT position, hash FROM log_head"))
        ).one()  # the head they left
    assert appended
    return Head(int(row.position), bytes(row.hash))


async def stored(engine: AsyncEngine) -> list[tuple[int, str, str, int]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT position, id, stream, stream_version FROM events ORDER BY position")
        )
        return [(r.position, r.id, r.stream, r.stream_version) for r in rows]


async def edges(engine: AsyncEngine) -> list[tuple[int, int]]:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT effect, cause FROM event_causes ORDER BY 1, 2"))
        return [(r.effect, r.cause) for r in rows]


async def assert_intact(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        report = await verify_chain(conn)
    assert report.is_intact, report


class TestWriteShared:
    async def test_a_group_on_the_head_goes_in_as_planned(self, engine: AsyncEngine) -> None:
        head = await append(engine, new("a"))
        group = planned_on(head, {"s": 1}, new("b"), new("c", "t", causes=("a", "b")))
        async with autocommit(engine) as driver:
            assert await write_shared(driver, head, group) is None
        assert await stored(engine) == [(1, "a", "s", 1), (2, "b", "s", 2), (3, "c", "t", 1)]
        assert await edges(engine) == [(3, 1), (3, 2)]
        await assert_intact(engine)

    async def test_a_group_moves_past_what_others_wrote_meanwhile(
        self, engine: AsyncEngine
    ) -> None:
        head = await append(engine, new("a"))
        group = planned_on(
            head,
            {"s": 1, "t": 0},
            new("b", has_data=True, data=TRICKY),
            new("c", "t", causes=("a", "b")),
            new("d", has_data=True, data=["x"]),
        )
        # Others write three events: two to "s", one to a stream the group does not use.
        moved_to = await append(engine, new("o1"), new("o2", "u"), new("o3"))
        async with autocommit(engine) as driver:
            moved = await write_shared(driver, head, group)
        assert isinstance(moved, MovedGroup)
        assert (moved.shift, moved.versions) == (3, {("acme", "s"): 2})
        assert moved.others == {("acme", "s"): 3, ("acme", "u"): 1}
        assert await stored(engine) == [
            (1, "a", "s", 1),
            (2, "o1", "s", 2),
            (3, "o2", "u", 1),
            (4, "o3", "s", 3),
            (5, "b", "s", 4),  # planned at 2, version 2
            (6, "c", "t", 1),
            (7, "d", "s", 5),
        ]
        # An edge to an event before the group stays; one within it moves with it.
        assert await edges(engine) == [(6, 1), (6, 5)]
        assert moved.head.position == moved_to.position + 3
        await assert_intact(engine)
        async with engine.connect() as conn:
            head_hash = (await conn.execute(text("SELECT hash FROM log_head"))).scalar_one()
        assert bytes(head_hash) == moved.head.hash

    async def test_past_too_many_events_of_others_its_streams_are_looked_up(
        self, engine: AsyncEngine
    ) -> None:
        head = await append(engine, new("a"))
        group = planned_on(head, {"s": 1}, new("b"), new("c"))
        await append(engine, new("o-s"), *(new(f"o{n}", "far") for n in range(10_000)))
        async with autocommit(engine) as driver:
            moved = await write_shared(driver, head, group)
        assert isinstance(moved, MovedGroup)
        assert (moved.shift, moved.versions, moved.others) == (10_001, {("acme", "s"): 1}, None)
        assert (await stored(engine))[-2:] == [(10_003, "b", "s", 3), (10_004, "c", "s", 4)]
        await assert_intact(engine)

    async def test_a_head_short_of_the_one_planned_on_writes_nothing(
        self, engine: AsyncEngine
    ) -> None:
        # Planned past the head (as a group behind one still on its way).
        group = planned_on(Head(5, bytes(32)), {"s": 0}, new("a"))
        async with autocommit(engine) as driver:
            with pytest.raises(HeadMoved) as behind:
                await write_shared(driver, Head(5, bytes(32)), group)
        assert (behind.value.found, behind.value.behind) == (0, True)
        assert await stored(engine) == []

    async def test_a_head_the_log_never_had_writes_nothing(self, engine: AsyncEngine) -> None:
        await append(engine, new("a"))
        # What an appender that lost track might believe: position 2, some hash.
        phantom = Head(2, b"\x01" * 32)
        group = planned_on(phantom, {"s": 2}, new("b", causes=("a",)))
        await append(engine, new("o1", "o"), new("o2", "o"))  # others move the head to 3
        async with autocommit(engine) as driver:
            with pytest.raises(HeadMoved) as moved:
                await write_shared(driver, phantom, group)
        assert (moved.value.found, moved.value.behind) == (3, False)
        assert [i for _, i, *_ in await stored(engine)] == ["a", "o1", "o2"]

    async def test_an_id_another_writer_took_meanwhile_writes_nothing(
        self, engine: AsyncEngine
    ) -> None:
        group = planned_on(Head(0, GENESIS_HASH), {"s": 0}, new("a"), new("taken", "t"))
        await append(engine, new("taken", "u"))
        async with autocommit(engine) as driver:
            with pytest.raises(psycopg.errors.UniqueViolation):
                await write_shared(driver, Head(0, GENESIS_HASH), group)
        assert await stored(engine) == [(1, "taken", "u", 1)]
