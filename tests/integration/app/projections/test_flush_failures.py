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
from app.projections.status import (
    WITHHELD_BATCH,
    ProjectionStatus,
    fetch_status,
    withhold_others_errors,
)
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
        await EventLog(conn).append(tenant, keyed("k", "a", "b", "a"))
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


def keyed(ids: str, *keys: str) -> list[NewEvent]:
    return [
        NewEvent(
            id=f"{ids}{i}",
            source="/s",
            type="test.keyed",
            stream="s",
            has_data=True,
            data={"key": k},
        )
        for i, k in enumerate(keys)
    ]


async def stopped(engine: AsyncEngine, projection: KeyIndex) -> ProjectionStatus:
    """``projection``'s status once its runner has recorded the failure it stops at."""
    runner = ProjectionRunner(engine, [projection], poll_interval_s=0.05)
    task = asyncio.create_task(runner.run())
    try:
        while (await runner.status(projection)).last_error is None:
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return await runner.status(projection)


async def test_a_batch_error_is_shown_to_no_tenant_but_one_whose_every_event_is_in_the_batch(
    engine: AsyncEngine,
) -> None:
    """acme's one event, then beta's key sent twice: the batch's write fails naming beta's
    key, and the failure is put at the batch's first event, acme's. GET /projections
    showed acme the text, beta's key in it."""
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
        await EventLog(conn).append("acme", keyed("a", "acme-1"))
        await EventLog(conn).append("beta", keyed("b", "beta-secret", "beta-secret"))
    status = await stopped(engine, KeyIndex())
    async with engine.connect() as conn:
        [for_acme] = await withhold_others_errors(conn, "acme", [status])
        [for_beta] = await withhold_others_errors(conn, "beta", [status])
    # The operator reads where the batch starts and ends, and the text.
    assert (status.error_position, status.error_through) == (1, 3), status
    assert status.last_error is not None
    assert "beta-secret" in status.last_error
    assert for_acme.last_error == WITHHELD_BATCH, for_acme.last_error
    assert for_beta.last_error == WITHHELD_BATCH  # acme's event is in it too
    assert (for_acme.error_position, for_acme.failures) == (1, status.failures)


async def test_a_batch_error_is_shown_to_the_tenant_every_event_of_the_batch_belongs_to(
    engine: AsyncEngine,
) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
        await EventLog(conn).append("beta", keyed("b", "k", "k"))
        await EventLog(conn).append("acme", [NewEvent(id="o", source="/s", type="t.o", stream="o")])
    status = await stopped(engine, KeyIndex())
    async with engine.connect() as conn:
        [for_beta] = await withhold_others_errors(conn, "beta", [status])
        [for_acme] = await withhold_others_errors(conn, "acme", [status])
    assert (status.error_position, status.error_through) == (1, 2), status
    assert for_beta.last_error == status.last_error
    assert for_acme.last_error == WITHHELD_BATCH
