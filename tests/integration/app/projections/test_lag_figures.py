"""GET /projections (and the lag gauges) read the checkpoints and the head in two
statements (READ COMMITTED: each its own snapshot). The head read first, a projection
that moved on between the two, with more of its events arriving, was reported with a
negative lag and a checkpoint past the head."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import BigInteger, Column, MetaData, Table, insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.projections import status as status_module
from app.projections.checkpoints import read_head
from app.projections.runner import ProjectionRunner
from app.projections.status import fetch_status
from app.store.log import EventLog
from app.store.records import NewEvent, StoredEvent

metadata = MetaData()
seen = Table("lag_figures_seen", metadata, Column("position", BigInteger, primary_key=True))


class Seen:
    name = "lag-figures"
    tables = (seen,)
    types = frozenset({"t.seen"})

    async def apply(self, conn: AsyncConnection, event: StoredEvent) -> None:
        await conn.execute(insert(seen).values(position=event.position))


async def _append(engine: AsyncEngine, start: int, count: int) -> None:
    async with engine.begin() as conn:
        await EventLog(conn).append(
            "acme",
            [
                NewEvent(id=f"s{start + i}", source="/s", type="t.seen", stream="s")
                for i in range(count)
            ],
        )


async def test_lag_events_is_never_negative_when_the_projection_moves_between_reads(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    projection = Seen()
    runner = ProjectionRunner(engine, [projection])
    await _append(engine, 0, 5)
    await runner.catch_up(projection)  # checkpoint 5 = head

    async def head_then_the_world_moves_on(conn: Any) -> int:
        head = await read_head(conn)
        # What another process does in the meantime (a busy store): 10 more of its events,
        # the projection applies them (its batch commits), and 1 more arrives.
        await _append(engine, 100, 10)
        await runner.catch_up(projection)
        await _append(engine, 200, 1)
        return head

    monkeypatch.setattr(status_module, "read_head", head_then_the_world_moves_on)
    async with engine.connect() as conn:
        [found] = await fetch_status(conn, [projection])
    # One event of its own is pending: it lags by one (or, at worst, 0 by the stale head).
    assert found.lag_events >= 0, found
    assert found.checkpoint <= found.head, found
