"""A rebuild whose flush fails with an error of the batch (no ``FlushFailed``: a
constraint its batched write breaks, a statement timeout of that write) was blamed on the
log's head, not on an event of the batch (from a review). The head is usually past the
checkpoint (the runner moves it only once a batch's worth of events it does not read has
gone by), so the error looked like a stop there: the next step cleared it, ``causeway
projections rebuild`` (asking the leader) printed "rebuilt" for a rebuild that failed, and
run by the CLI itself it told the operator to skip the head, another tenant's event, whose
tenant then saw the error text. A rebuild now flushes each batch as a step does, and a
failure is put at the batch's first event (test_flush_failures.py: the normal path)."""

from __future__ import annotations

import asyncio

import pytest
import typer
from sqlalchemy import URL
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.cli.projections import _rebuild
from app.db.engine import create_engine
from app.projections.batches import ProjectionFailed
from app.projections.runner import ProjectionRunner
from app.projections.status import WITHHELD_BATCH, fetch_status, withhold_others_errors
from app.store.log import EventLog
from app.store.records import NewEvent
from tests.integration.app.projections.test_flush_failures import KeyIndex as FlushingKeys
from tests.integration.app.projections.test_flush_failures import keyed, metadata


class KeyIndex(FlushingKeys):
    """test_flush_failures' projection; ``broken`` (a faulty release deployed before the
    rebuild), its batch's one statement breaks the primary key: a failure of the batch's
    write, not of one event."""

    name = "rebuild-key-index"
    broken = False

    async def flush(self, conn: AsyncConnection) -> None:
        if self.broken:
            self.pending = ["same" for _ in self.pending]
        await super().flush(conn)


async def _setup(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    async with engine.begin() as conn:
        # Positions 1-3: the projection's events, in tenant acme.
        await EventLog(conn).append("acme", keyed("k", "a", "b", "c"))


async def _others(engine: AsyncEngine, first: int, count: int) -> None:
    """Events of another tenant, of a type the projection does not read."""
    async with engine.begin() as conn:
        await EventLog(conn).append(
            "other",
            [
                NewEvent(id=f"o{first + i}", source="/s", type="test.other", stream="o")
                for i in range(count)
            ],
        )


async def test_a_rebuilds_batch_failure_is_put_at_an_event_of_the_batch(
    engine: AsyncEngine,
) -> None:
    await _setup(engine)
    projection = KeyIndex()
    runner = ProjectionRunner(engine, [projection])
    await runner.catch_up(projection)  # checkpoint 3 (the head)
    await _others(engine, 0, 3)  # positions 4-6: nothing of its own, checkpoint stays
    projection.broken = True
    with pytest.raises(ProjectionFailed) as failed:
        await runner.rebuild(projection)
    assert isinstance(failed.value.__cause__, IntegrityError)
    # Not the head (6: tenant "other", type test.other, which it never reads): an event
    # of the batch that failed, as the normal path puts it (its first, position 1).
    assert failed.value.position in (1, 2, 3), (
        f"the rebuild's failure is blamed on position {failed.value.position}, the head"
    )


async def test_a_rebuild_the_leader_fails_is_not_reported_rebuilt_by_the_cli(
    engine: AsyncEngine, database_url: URL
) -> None:
    await _setup(engine)
    projection = KeyIndex()
    leader = ProjectionRunner(engine, [projection], poll_interval_s=0.05, max_backoff_s=0.2)
    task = asyncio.create_task(leader.run())
    try:
        deadline = asyncio.get_running_loop().time() + 20
        while (await leader.status(projection)).checkpoint < 3:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
        await _others(engine, 0, 3)  # positions 4-6, which it does not read
        await asyncio.sleep(0.3)
        projection.broken = True  # the rebuild will fail
        # `causeway projections rebuild rebuild-key-index`: a leader runs, so it asks.
        asker_engine = create_engine(database_url, pool_size=2)
        asker = ProjectionRunner(asker_engine, [KeyIndex()])
        outcome: int | str
        try:
            outcome = await asyncio.wait_for(
                _rebuild(asker, asker.projection(KeyIndex.name), 15), 30
            )
        except typer.Exit as exited:
            outcome = f"exit {exited.exit_code}"
        status = await leader.status(projection)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    # The rebuild failed (the leader logged it, the read model is the old one): the CLI
    # must say so and exit 1, not print "rebuilt rebuild-key-index".
    assert outcome == "exit 1", (
        f"the CLI reported the failed rebuild as done ({outcome!r}); status now: "
        f"error={status.last_error!r} at {status.error_position}, failures={status.failures}"
    )


async def test_a_failed_rebuild_stays_in_status_until_a_rebuild_succeeds(
    engine: AsyncEngine,
) -> None:
    """runner.py: a failed rebuild's error "stays (at a position the checkpoint passed, so
    the projection goes on) until a rebuild succeeds"."""
    await _setup(engine)
    projection = KeyIndex()
    runner = ProjectionRunner(engine, [projection], poll_interval_s=0.05)
    await runner.catch_up(projection)
    await _others(engine, 0, 3)
    projection.broken = True
    await runner.request_rebuild(projection)
    task = asyncio.create_task(runner.run())
    try:
        deadline = asyncio.get_running_loop().time() + 20
        while (await runner.status(projection)).rebuild_requested:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # the leader goes on following the log
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    async with engine.connect() as conn:
        [status] = await fetch_status(conn, [projection])
    assert status.last_error is not None, (
        f"the failed rebuild left no trace in GET /projections: {status}"
    )


async def test_a_rebuild_the_cli_runs_points_at_an_event_of_the_batch_and_keeps_its_error_in_its_tenant(
    engine: AsyncEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    """No leader: ``causeway projections rebuild`` rebuilds itself, records the failure
    and tells the operator which event to skip. It names the head (tenant "other"'s
    event, of a type the projection never reads), and GET /projections then shows the
    error text, acme's rows in it, to tenant "other" and withholds it from acme."""
    await _setup(engine)
    projection = KeyIndex()
    runner = ProjectionRunner(engine, [projection])
    await runner.catch_up(projection)
    await _others(engine, 0, 3)  # head 6
    projection.broken = True
    cli_engine = create_engine(engine.url, pool_size=2)
    cli = ProjectionRunner(cli_engine, [projection])
    with pytest.raises(typer.Exit):
        await _rebuild(cli, projection, 5)
    said = capsys.readouterr().err
    async with engine.connect() as conn:
        [status] = await fetch_status(conn, [projection])
        [for_other] = await withhold_others_errors(conn, "other", [status])
        [for_acme] = await withhold_others_errors(conn, "acme", [status])
    assert "skip rebuild-key-index 6" not in said, said
    assert (status.error_position, status.error_through) == (1, 3), status
    assert for_other.last_error == WITHHELD_BATCH, for_other.last_error
    assert for_acme.last_error == status.last_error
