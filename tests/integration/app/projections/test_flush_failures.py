"""A projection whose batch fails when it writes what the batch kept (``Flushing``), with
an error that is not tied to one event (no ``FlushFailed``), e.g. a constraint its
batched write breaks, stops at the batch's first event with the error in GET
/projections (README). It was blamed on the log's head, and the catch-up to it failed
again before the failure was recorded: the projection stood still, retrying every poll,
and its status showed no error."""

from __future__ import annotations

import asyncio
from secrets import token_hex

from sqlalchemy import Column, MetaData, Table, Text, insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.projections.runner import ProjectionRunner
from app.projections.status import fetch_status
from app.store.log import EventLog
from app.store.records import NewEvent, StoredEvent

metadata = MetaData()
keys = Table("flush_failure_keys", metadata, Column("key", Text, primary_key=True))


class KeyIndex:
    """Keeps each event's key and writes a batch's keys in one statement when the batch
    ends: a key seen twice breaks the primary key (a batch-level failure)."""

    name = "key-index"
    tables = (keys,)
    types = frozenset({"test.keyed"})

    def __init__(self) -> None:
        self.pending: list[str] = []
        self.batch: AsyncConnection | None = None

    async def apply(self, conn: AsyncConnection, event: StoredEvent) -> None:
        if conn is not self.batch:
            self.pending.clear()
            self.batch = conn
        self.pending.append(event.record.data["key"])

    async def flush(self, conn: AsyncConnection) -> None:
        pending, self.pending = self.pending, []
        if pending:
            await conn.execute(insert(keys), [{"key": k} for k in pending])


async def test_a_batch_level_flush_failure_is_recorded_and_not_silent(
    engine: AsyncEngine,
) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    tenant = f"t{token_hex(3)}"
    # Positions 1..4: keys a, b, a (the poison: a duplicate), then another tenant's event.
    async with engine.begin() as conn:
        await EventLog(conn).append(
            tenant,
            [
                NewEvent(
                    id=f"k{i}",
                    source="/s",
                    type="test.keyed",
                    stream="s",
                    has_data=True,
                    data={"key": key},
                )
                for i, key in enumerate(["a", "b", "a"])
            ],
        )
        await EventLog(conn).append(
            "other", [NewEvent(id="o1", source="/s", type="test.other", stream="o")]
        )
    projection = KeyIndex()
    runner = ProjectionRunner(engine, [projection], poll_interval_s=0.05, max_backoff_s=0.2)
    task = asyncio.create_task(runner.run())
    try:
        await asyncio.sleep(2.0)  # dozens of poll intervals: it has tried many times
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    async with engine.connect() as conn:
        [status] = await fetch_status(conn, [projection])
    # It cannot go on (the batch keeps failing): it has applied nothing ...
    assert status.checkpoint == 0
    assert status.lag_events > 0
    # ... and GET /projections / `causeway projections status` must say so.
    assert status.last_error is not None, (
        f"the projection is stuck but its status shows no error: {status}"
    )
    assert status.failures > 0
