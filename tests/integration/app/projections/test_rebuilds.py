"""Rebuilds asked of a running leader: `causeway projections rebuild` tells what became of
its own request (a retry failing meanwhile is the leader's, not the rebuild's), and a
rebuild that fails at no event (a statement of its own past the timeout) is withdrawn with
its error recorded, as one failing at an event is, so the projection goes on."""

from __future__ import annotations

import asyncio

import typer
from sqlalchemy import URL, BigInteger, Column, MetaData, Table, func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.cli.projections import _rebuild
from app.db.engine import create_engine
from app.projections.base import Projection
from app.projections.runner import ProjectionRunner
from app.projections.status import fetch_status
from app.store.log import EventLog
from app.store.records import NewEvent, StoredEvent

metadata = MetaData()
rows = Table("rebuilt_rows", metadata, Column("position", BigInteger, primary_key=True))


class Rows:
    """One row per event; the event at ``slow_at`` takes a while (a lock wait, a slow
    statement) before it writes its row."""

    name = "rebuilt-rows"
    tables = (rows,)
    types = frozenset({"t.count"})

    def __init__(self, slow_at: int, inside: asyncio.Event | None = None) -> None:
        self.slow_at = slow_at
        self.inside = inside

    async def apply(self, conn: AsyncConnection, event: StoredEvent) -> None:
        if event.position == self.slow_at:
            if self.inside is not None:
                self.inside.set()
            await asyncio.sleep(0.4)
        await conn.execute(insert(rows).values(position=event.position))


async def _asked_to_rebuild(database_url: URL, projection: Projection) -> int | str:
    """What `causeway projections rebuild` ends with, asked while a leader runs: the
    count it answers, or "exit N"."""
    runner = ProjectionRunner(create_engine(database_url, pool_size=2), [projection])
    try:
        return await asyncio.wait_for(_rebuild(runner, runner.projection(projection.name), 30), 40)
    except typer.Exit as exited:
        return f"exit {exited.exit_code}"


async def _positions(engine: AsyncEngine) -> list[int]:
    async with engine.connect() as conn:
        return list(
            (await conn.execute(select(rows.c.position).order_by(rows.c.position))).scalars()
        )


async def test_a_rebuild_asked_of_a_stuck_leader_is_not_reported_failed_when_it_succeeds(
    engine: AsyncEngine, database_url: URL
) -> None:
    """The read model is damaged (a stray row the next event's row collides with), so the
    projection is stuck at that event: what a rebuild is for. The leader's retry failing
    once more, before it rebuilt, was told as the rebuild's failure ("... skip ... passes
    over that event"), exit 1, though the rebuild went through."""
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
        await EventLog(conn).append(
            "acme",
            [NewEvent(id=f"c{i}", source="/s", type="t.count", stream="s") for i in range(3)],
        )  # positions 1, 2, 3
        await conn.execute(insert(rows).values(position=3))  # the damage
    inside = asyncio.Event()
    leader = ProjectionRunner(engine, [Rows(3, inside)], poll_interval_s=0.05, max_backoff_s=0.05)
    task = asyncio.create_task(leader.run())
    try:
        await asyncio.wait_for(inside.wait(), 20)  # the leader is applying event 3, again
        outcome = await _asked_to_rebuild(database_url, Rows(3))
        async with engine.connect() as conn:
            [status] = await fetch_status(conn, [Rows(3)])
        # What happened in fact: the leader rebuilt the read model, and it is whole.
        for _ in range(100):
            if not status.rebuild_requested and await _positions(engine) == [1, 2, 3]:
                break
            await asyncio.sleep(0.1)
            async with engine.connect() as conn:
                [status] = await fetch_status(conn, [Rows(3)])
        assert await _positions(engine) == [1, 2, 3]
        assert (status.last_error, status.rebuild_requested) == (None, False)
        assert outcome == -1, f"the command reported {outcome!r} for a rebuild that succeeded"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class Slow(Rows):
    def __init__(self) -> None:
        super().__init__(slow_at=0)


async def _append(engine: AsyncEngine, prefix: str, count: int) -> None:
    async with engine.begin() as conn:
        await EventLog(conn).append(
            "acme",
            [
                NewEvent(id=f"{prefix}{i}", source="/s", type="t.count", stream="s")
                for i in range(count)
            ],
        )


async def _rows(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int(await conn.scalar(select(func.count()).select_from(rows)) or 0)


async def test_a_rebuild_that_times_out_is_withdrawn_and_the_projection_goes_on(
    engine: AsyncEngine, database_url: URL
) -> None:
    """Emptying a large read model (the task table after a busy week, say) past the
    statement timeout, stood in for by a slow DELETE and a 300 ms timeout. The rebuild
    failed at no event, so it was let through, and every new lead started it again: the
    projection applied nothing new, and showed no error."""
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
        await conn.execute(
            text(
                "CREATE FUNCTION rebuilt_rows_slow() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN PERFORM pg_sleep(2); RETURN NULL; END $$"
            )
        )
        await conn.execute(
            text(
                "CREATE TRIGGER rebuilt_rows_slow BEFORE DELETE ON rebuilt_rows"
                " FOR EACH STATEMENT EXECUTE FUNCTION rebuilt_rows_slow()"
            )
        )
    await _append(engine, "a", 3)
    runner_engine = create_engine(database_url, pool_size=3, statement_timeout_ms=300)
    runner = ProjectionRunner(runner_engine, [Slow()], poll_interval_s=0.05)
    projection = runner.projection("rebuilt-rows")
    task = asyncio.create_task(runner.run())
    try:
        for _ in range(200):
            if await _rows(engine) == 3:
                break
            await asyncio.sleep(0.05)
        assert await _rows(engine) == 3
        await runner.request_rebuild(projection)
        await asyncio.sleep(0.3)
        await _append(engine, "b", 3)  # positions 4-6: the log goes on
        for _ in range(100):  # 5 s: a hundred times the poll interval
            if await _rows(engine) == 6:
                break
            await asyncio.sleep(0.05)
        async with engine.connect() as conn:
            [status] = await fetch_status(conn, [projection])
        assert (await _rows(engine), status.checkpoint) == (6, 6), (
            f"the projection is held back by the failing rebuild: {status}"
        )
        assert not status.rebuild_requested
        assert status.last_error is not None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await runner_engine.dispose()


async def test_a_rebuild_whose_read_of_the_log_times_out_is_withdrawn_too(
    engine: AsyncEngine, database_url: URL
) -> None:
    """The rebuild's reads of the log run on the driver (``DriverStatement``): one past the
    statement timeout raised psycopg's own error, not SQLAlchemy's, which the withdrawal
    did not catch. It ended the lead as an outage does, and the next lead started the
    rebuild again, for as long as the read took too long (a read model of rare types on a
    large log reads the whole log): the projection applied nothing new and showed no
    error. Stood in for by a lock held on ``events`` and a 300 ms timeout."""
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    await _append(engine, "a", 3)
    runner_engine = create_engine(database_url, pool_size=3, statement_timeout_ms=300)
    runner = ProjectionRunner(runner_engine, [Rows(slow_at=0)], poll_interval_s=0.05)
    projection = runner.projection("rebuilt-rows")
    task = asyncio.create_task(runner.run())
    try:
        for _ in range(200):
            if await _rows(engine) == 3:
                break
            await asyncio.sleep(0.05)
        assert await _rows(engine) == 3
        async with engine.connect() as holder:  # the log cannot be read meanwhile
            await holder.execute(text("LOCK TABLE events IN ACCESS EXCLUSIVE MODE"))
            await runner.request_rebuild(projection)
            asked = True
            for _ in range(100):  # 5 s: many times the timeout
                async with engine.connect() as conn:
                    asked = await conn.scalar(
                        text(
                            "SELECT rebuild_requested FROM projection_checkpoints WHERE name = :n"
                        ),
                        {"n": projection.name},
                    )
                if not asked:
                    break
                await asyncio.sleep(0.05)
            await holder.rollback()
        assert not asked, "the rebuild is started again and again, holding the projection back"
        await _append(engine, "b", 3)
        for _ in range(100):
            if await _rows(engine) == 6:
                break
            await asyncio.sleep(0.05)
        async with engine.connect() as conn:
            [status] = await fetch_status(conn, [projection])
        assert (await _rows(engine), status.checkpoint) == (6, 6), status
        assert status.last_error is not None, status
        assert "QueryCanceled" in status.last_error, status
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await runner_engine.dispose()


class FailsAt3:
    name = "rebuilt-failing"
    tables = (rows,)
    types = frozenset({"t.count"})

    def __init__(self, rebuilds: list[int]) -> None:
        self.rebuilds = rebuilds

    async def apply(self, conn: AsyncConnection, event: StoredEvent) -> None:
        if event.position == 1:
            self.rebuilds.append(1)  # each pass from the start (the first, then rebuilds)
        if event.position == 3:
            raise ValueError("event 3 cannot be applied")
        await conn.execute(insert(rows).values(position=event.position))


async def test_a_rebuild_failing_where_the_leader_is_stuck_is_reported_failed(
    engine: AsyncEngine, database_url: URL
) -> None:
    """The rebuild fails at the event the leader is stuck at, past its checkpoint; a
    rule that took only a failure at or below the checkpoint as the rebuild's said
    "rebuilt", exit 0."""
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
        await EventLog(conn).append(
            "acme",
            [NewEvent(id=f"c{i}", source="/s", type="t.count", stream="s") for i in range(4)],
        )  # positions 1-4
    passes: list[int] = []
    leader = ProjectionRunner(engine, [FailsAt3(passes)], poll_interval_s=0.05, max_backoff_s=0.2)
    task = asyncio.create_task(leader.run())
    try:
        for _ in range(200):  # the leader is stuck at event 3
            async with engine.connect() as conn:
                [status] = await fetch_status(conn, [FailsAt3([])])
            if status.error_position == 3:
                break
            await asyncio.sleep(0.05)
        assert (status.checkpoint, status.error_position) == (2, 3)
        outcome = await _asked_to_rebuild(database_url, FailsAt3([]))
        assert len(passes) >= 2, "the leader did not rebuild"
        # The leader's rebuild failed at event 3 and was withdrawn; nothing was rebuilt.
        assert outcome == "exit 1", f"the command reported {outcome!r} for a failed rebuild"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
