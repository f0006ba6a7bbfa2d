"""Runs projections: catch up from the checkpoint in batches, then follow the log.

Each batch is one transaction: the checkpoint row is locked, the projection's events
after it (up to the head read first, so none can commit later below it) are applied,
and the checkpoint moves; so an event takes effect exactly once even if the process dies
mid-batch. One runner per projection leads, through a session advisory lock on its own
connection, so runners in several processes or machines never apply an event twice;
the others stand by and take over when the leader's connection goes.

NOTIFY (sent by every append) wakes a runner early; it never relies on it: it polls every
``poll_interval_s`` too. A failing event stops its projection at that position: the
error is recorded (see ``status.fetch_status``) and the batch is retried with exponential
backoff; nothing is skipped unless an operator says so. ``skip`` parks the event the
projection is stopped at (with a reason, kept with the error): the projection, and every
rebuild of it, passes over that event from then on; ``unskip`` takes it back (for the
next rebuild). A rebuild, when requested, replays the projection from
position 0 in one transaction, so readers see the old read model until the new one
commits, never a half-built one. One that fails is withdrawn, and its error stays (at a
position the checkpoint passed, so the projection goes on) until a rebuild succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from sqlalchemy import Delete, Table, delete, select, tuple_, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.tables import projection_checkpoints, projection_skips
from app.errors import BadRequest, Conflict, NotFound
from app.projections import checkpoints
from app.projections.base import (
    Projection,
    Selection,
    Selective,
    Tallying,
    narrowing,
    quiet_types,
)
from app.projections.batches import ProjectionFailed, flush_batch, read_and_apply
from app.projections.leadership import Leadership, take_lead
from app.projections.status import ProjectionStatus, fetch_status
from app.store.append.writes import NOTIFY_CHANNEL, read_wake_hint
from app.store.failures import is_connection_lost
from app.telemetry import tracing
from app.telemetry.batch_spans import traced_batch

logger = logging.getLogger(__name__)
_c = projection_checkpoints.c


class ProjectionRunner:
    def __init__(
        self,
        engine: AsyncEngine,
        projections: Sequence[Projection],
        *,
        listen_dsn: str | None = None,
        batch_size: int = 500,
        batch_sizes: Mapping[str, int] | None = None,
        gathers_s: Mapping[str, float] | None = None,
        poll_interval_s: float = 1.0,
        max_backoff_s: float = 60.0,
    ) -> None:
        """``batch_sizes`` overrides ``batch_size`` (events per transaction) by name;
        ``gathers_s`` how long a woken projection lets appends gather before its next
        batch (50 ms unless named: one that reads every event and may lag pays less per
        event in fewer, fuller batches)."""
        for projection in projections:
            if isinstance(projection, Tallying) and isinstance(projection, Selective):
                raise TypeError(f"projection {projection.name!r}: a tally reads no selection")
        self._engine = engine
        self._projections = list(projections)
        self._listen_dsn = listen_dsn
        self._batch_size = batch_size
        self._batch_sizes = dict(batch_sizes or {})
        self._gathers_s = dict(gathers_s or {})
        self._poll_interval_s = poll_interval_s
        self._max_backoff_s = max_backoff_s
        self._wake = {p.name: asyncio.Event() for p in self._projections}
        # The types whose appends wake each projection (None: any append). A Selective
        # one's changes with its selection, as of its last batch.
        self._interest: dict[str, frozenset[str] | None] = {
            p.name: p.types for p in self._projections
        }
        self._quiet = {p.name: quiet_types(p) for p in self._projections}
        # Whether a rebuild was asked for, as each projection's last batch read it.
        self._rebuild_asked = {p.name: False for p in self._projections}

    async def dispose(self) -> None:
        await self._engine.dispose()

    def projection(self, name: str) -> Projection:
        for projection in self._projections:
            if projection.name == name:
                return projection
        raise NotFound(
            f"no projection {name!r}; there are {', '.join(p.name for p in self._projections)}"
        )

    @property
    def projections(self) -> list[Projection]:
        return list(self._projections)

    async def run(self) -> None:
        """Lead (or stand by for) every projection until cancelled."""
        async with asyncio.TaskGroup() as group:
            if self._listen_dsn:
                group.create_task(self._listen(self._listen_dsn))
            for projection in self._projections:
                group.create_task(self._follow(projection))

    async def catch_up(self, projection: Projection) -> None:
        """Apply everything up to the current head now (for tests and the CLI)."""
        while await self.step(projection):
            pass

    async def step(self, projection: Projection, *, until: int | None = None) -> int:
        """Apply one batch (up to position ``until``); how far the checkpoint moved."""
        moved, _ = await self._step(projection, until)
        return moved

    async def _step(self, projection: Projection, until: int | None) -> tuple[int, bool]:
        if not tracing.on:
            return await self._apply_batch(projection, until)
        return await traced_batch(projection.name, self._apply_batch(projection, until))

    async def _apply_batch(self, projection: Projection, until: int | None) -> tuple[int, bool]:
        """``step``, and whether another batch should follow at once: this one was
        full, or ended at an event that may change what a Selective projection reads.
        Otherwise the projection has read all it reads up to the head, even when the
        checkpoint moved past events of no interest to it, and waits to be woken (an
        append sends the hint; polling covers a lost one)."""
        async with self._engine.begin() as conn:
            locked = await checkpoints.lock_checkpoint(conn, projection.name)
            checkpoint, failing, head = locked.position, locked.failing, locked.head
            self._rebuild_asked[projection.name] = locked.rebuild_requested
            if until is not None:
                head = min(head, until)
            size = self._batch_sizes.get(projection.name, self._batch_size)
            selection = None
            if isinstance(projection, Selective):
                selection = await projection.selection(conn)
                interest = _interest(projection, selection)
                if interest != self._interest[projection.name]:
                    # An append that committed after the head was read, and before this,
                    # may have sent a hint the old interest ignored: step once more.
                    self._interest[projection.name] = interest
                    self._wake[projection.name].set()
            batch = await read_and_apply(conn, projection, checkpoint, head, size, selection)
            found, reached, more = batch.applied, batch.reached, batch.more
            if found:
                await flush_batch(projection, conn, batch)
            if (
                not found
                and reached - checkpoint < size
                and not (failing and until is None)
                and narrowing(projection) is None
            ):
                # Nothing of ours: moving the checkpoint would cost a commit (an fsync)
                # for every append; it moves once a batch's worth has gone by instead.
                # A failed projection's retry moves on at once, which clears its error:
                # the event it failed on is no longer read (it was skipped). A narrowed
                # one's moves on too: what it passed was its own (the task book's
                # decisions, whose rows are pruned once it has passed them).
                return 0, False
            if reached > checkpoint:
                await checkpoints.advance(conn, projection.name, reached)
            return int(reached - checkpoint), more

    async def rebuild(self, projection: Projection) -> int:
        """Empty the read model and apply the log again from position 0, atomically; each
        batch flushed as a step's is, so that a flush's failure is put at the batch's first
        event (a rebuild that failed blamed the head: an event it may never have read)."""
        async with self._engine.begin() as conn:
            await checkpoints.lock_checkpoint(conn, projection.name)  # no step meanwhile
            for table in projection.tables:
                await conn.execute(_delete_in_key_order(table))
            # The head once the rows are emptied: a decision appended before it, whose row
            # the delete took (waiting for its writer to commit), is applied again. (Read
            # before, the row was rebuilt without it, behind the log until the next step,
            # and the sweeper's next decision on it was refused as a conflict.)
            head = await checkpoints.read_head(conn)
            after = applied = 0
            more = True
            while more:
                batch = await read_and_apply(conn, projection, after, head, 1000, None)
                if batch.applied:
                    await flush_batch(projection, conn, batch)
                after, more = batch.reached, batch.more
                applied += batch.applied
            await checkpoints.advance(
                conn,
                projection.name,
                head,
                rebuild_requested=False,
                last_error=None,
                error_position=None,
                error_through=None,
                failures=0,
            )
        return applied

    def leadership(
        self, projection: Projection
    ) -> contextlib.AbstractAsyncContextManager[Leadership | None]:
        """Try to lead ``projection``: the lead when this runner has it, else None."""
        return take_lead(self._engine, f"causeway.projection:{projection.name}")

    async def _follow(self, projection: Projection) -> None:
        while True:
            try:
                async with self.leadership(projection) as lead:
                    if lead is not None:
                        await self._lead(projection, lead)
            except (DBAPIError, psycopg.OperationalError, OSError) as exc:
                logger.warning("projection %s: database unavailable: %s", projection.name, exc)
            except Exception:
                # Whatever went wrong, this projection keeps its leader loop (and the others
                # theirs): log it, give up the lead, and start over after a pause.
                logger.exception("projection %s: unexpected failure", projection.name)
            await asyncio.sleep(self._poll_interval_s)

    async def _lead(self, projection: Projection, lead: Leadership) -> None:
        failures = 0
        # Whether an operator asked for a rebuild: read on taking the lead and after a
        # failure, and otherwise by each step with the checkpoint it locks.
        rebuild = await self.is_rebuild_requested(projection)
        while True:
            # Before each batch, check the lock's connection still lives: once it died,
            # another runner may lead, and a busy leader that checked only when idle went
            # on applying beside it (the error ends this lead; the loop starts over).
            await lead.confirm()
            if rebuild:
                await self._rebuild_as_asked(projection)
            try:
                _, more = await self._step(projection, None)
                rebuild = self._rebuild_asked[projection.name]
                failures = 0
            except ProjectionFailed as failed:
                failures += 1
                failed = await self._up_to(projection, failed)
                await self.record_failure(projection, failed)
                delay = min(self._poll_interval_s * 2**failures, self._max_backoff_s)
                logger.error(
                    "projection %s stopped at position %d (%s); retrying in %.1f s",
                    projection.name,
                    failed.position,
                    failed,
                    delay,
                )
                await asyncio.sleep(delay)
                rebuild = await self.is_rebuild_requested(projection)
                continue
            if not more and not rebuild:
                await self._wait(projection)

    async def _up_to(self, projection: Projection, failed: ProjectionFailed) -> ProjectionFailed:
        """Keep what came before the failing event, so the projection stops right at it
        (the failed batch was rolled back whole); the failure it stops at: an earlier
        one, when the batches up to it fail too (a flush's failure is the batch's)."""
        while True:
            try:
                while await self.step(projection, until=failed.position - 1):
                    pass
            except ProjectionFailed as earlier:
                if earlier.position < failed.position:
                    failed = earlier
                    continue
            return failed

    async def _rebuild_as_asked(self, projection: Projection) -> None:
        """The rebuild an operator asked for. One that fails is withdrawn: the event it
        failed on is recorded (until a rebuild succeeds: what ``skip`` takes), and the read
        model, as it was, goes on following the log. Retried, it would replay the whole
        log again and again, and hold back every event after it."""
        try:
            count = await self.rebuild(projection)
        except ProjectionFailed as failed:
            await self.record_failure(projection, failed, withdraw=True)
            logger.error(
                "projection %s: the rebuild failed at position %d (%s); the read model is as "
                "it was and goes on",
                projection.name,
                failed.position,
                failed,
            )
            return
        except (DBAPIError, psycopg.Error) as exc:
            if is_connection_lost(exc):
                raise  # the database is gone: the lead ends (``_follow``)
            # A statement of its own failed (emptying a large read model, or reading the
            # log, past the statement timeout, say: through SQLAlchemy or on the driver),
            # at no event: asked again on the next lead, it failed for ever.
            withdrawn = RebuildFailed(exc)
            await self.record_failure(projection, withdrawn, withdraw=True)
            logger.error(
                "projection %s: the rebuild failed (%s); the read model is as it was and goes on",
                projection.name,
                withdrawn,
            )
            return
        logger.info("projection %s rebuilt from %d events", projection.name, count)

    async def _wait(self, projection: Projection) -> None:
        wake = self._wake[projection.name]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), self._poll_interval_s)
            # Under load every append notifies: let a few arrive, then take them at once.
            gather_s = self._gathers_s.get(projection.name, 0.05)
            await asyncio.sleep(min(gather_s, self._poll_interval_s))
        wake.clear()

    async def _listen(self, dsn: str) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    async for notice in conn.notifies():
                        appended = read_wake_hint(notice.payload)
                        for projection in self._projections:
                            if self.wakes(projection, appended):
                                self._wake[projection.name].set()
            except (psycopg.Error, OSError) as exc:
                logger.warning("LISTEN lost (%s); polling meanwhile", exc)
            await asyncio.sleep(self._poll_interval_s)

    def wakes(self, projection: Projection, appended: frozenset[str] | None) -> bool:
        """Whether an append of ``appended`` types (None: unknown) wakes ``projection``."""
        if appended is None:
            return True
        if appended <= self._quiet[projection.name]:
            return False
        types = self._interest[projection.name]
        return types is None or not types.isdisjoint(appended)

    async def request_rebuild(self, projection: Projection) -> None:
        """Ask whichever runner leads ``projection`` to rebuild it."""
        async with self._engine.begin() as conn:
            await conn.execute(
                insert(projection_checkpoints)
                .values(name=projection.name, rebuild_requested=True)
                .on_conflict_do_update(index_elements=["name"], set_={"rebuild_requested": True})
            )

    async def skip(self, projection: Projection, position: int, reason: str) -> str:
        """Park the event at ``position``, which ``projection`` must be stopped at (failing):
        it passes over it at its next retry, and so does every rebuild. The error it
        failed with is kept beside ``reason``, and returned."""
        if not reason.strip():
            raise BadRequest("say why the event is skipped (a reason is kept with it)")
        async with self._engine.begin() as conn:
            row = (
                await conn.execute(
                    select(_c.error_position, _c.last_error)
                    .where(_c.name == projection.name)
                    .with_for_update()
                )
            ).first()
            stopped = row.error_position if row is not None else None
            if row is None or stopped != position:
                where = "is not stopped" if stopped is None else f"is stopped at {stopped}"
                raise Conflict(
                    f"{projection.name} {where}: only the event a projection is stopped at "
                    "can be skipped"
                )
            await conn.execute(
                insert(projection_skips)
                .values(
                    name=projection.name,
                    position=position,
                    reason=reason,
                    error=row.last_error,
                    skipped_at=datetime.now(UTC),
                )
                .on_conflict_do_nothing()
            )
            return str(row.last_error or "")

    async def unskip(self, projection: Projection, position: int) -> None:
        """Take back a skip: the next rebuild applies the event again (the projection
        itself has passed it)."""
        async with self._engine.begin() as conn:
            gone = await conn.execute(
                delete(projection_skips).where(
                    projection_skips.c.name == projection.name,
                    projection_skips.c.position == position,
                )
            )
            if not gone.rowcount:
                raise NotFound(f"{projection.name} skips no event at position {position}")

    async def is_rebuild_requested(self, projection: Projection) -> bool:
        async with self._engine.connect() as conn:
            row = await checkpoints.REBUILD_REQUESTED.first(conn, which=projection.name)
            return row is not None and bool(row[0])

    async def status(self, projection: Projection) -> ProjectionStatus:
        async with self._engine.connect() as conn:
            [found] = await fetch_status(conn, [projection])
        return found

    async def record_failure(
        self,
        projection: Projection,
        failed: ProjectionFailed | RebuildFailed,
        *,
        withdraw: bool = False,
    ) -> None:
        """Record that ``projection`` failed at ``failed.position`` (what ``skip`` needs;
        None: a rebuild failed at no event); ``withdraw``: a rebuild failed, and its
        request is withdrawn in the same breath.

        An error at or below the checkpoint (a rebuild's: the read model passed that event
        long ago) stays while the projection follows the log, until a rebuild succeeds;
        one past it (the projection stopped there) clears once it is passed."""
        values: dict[str, Any] = {
            "last_error": str(failed)[:2000],
            "error_position": failed.position,
            "error_through": failed.through,
            "failures": _c.failures + 1,
            "updated_at": datetime.now(UTC),
        }
        if withdraw:
            values["rebuild_requested"] = False
        async with self._engine.begin() as conn:
            await checkpoints.ENSURE_CHECKPOINT.run(
                conn, which=projection.name
            )  # a first rebuild's
            await conn.execute(
                update(projection_checkpoints).where(_c.name == projection.name).values(values)
            )


class RebuildFailed(Exception):
    """A rebuild that failed at no event: one of its own statements did."""

    position: int | None = None
    through: int | None = None

    def __init__(self, error: DBAPIError | psycopg.Error) -> None:
        super().__init__(_first_line(error.orig if isinstance(error, DBAPIError) else error))


def _first_line(error: BaseException | None) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _interest(projection: Projection, selection: Selection) -> frozenset[str] | None:
    """What wakes a Selective projection: while it reads no tenant, only the types that
    can change that; once it reads some, every append of its types (a wake-up hint names
    types, not tenants)."""
    if selection.tenants:
        return projection.types
    return frozenset(selection.types)


def _delete_in_key_order(table: Table) -> Delete:
    """Every row of ``table`` deleted, locked first in the order of its primary key, the
    order in which the commands that write a read model's rows lock them (the
    scheduler's, task rows by tenant and id), in one statement (one snapshot: a row
    written after it is not waited for). A plain DELETE locks rows in the order they lie
    on disk, and deadlocked with a command that held one row and asked for the next."""
    key = list(table.primary_key.columns)
    if not key:
        return delete(table)
    locked = select(*key).order_by(*key).with_for_update().subquery()
    return delete(table).where(tuple_(*key).in_(select(*locked.c)))
