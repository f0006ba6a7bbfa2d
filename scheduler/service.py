"""The scheduler's clock-driven work: expiring leases, pruning finished tasks' rows, and
advising on worker counts.

Everything event-driven (routing, task creation, debouncing, pre-warming) is a projection
the runner follows; what is left depends on time passing: a lease whose worker went quiet
must go back to the queue, a finished task's row goes after the retention period (its
decisions stay in the log), and each queue's autoscale advice is refreshed every interval.
All are safe to run in every ``serve`` process at once (rows are taken with SKIP LOCKED).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from app.db.engine import Connection, Engine
from app.settings import Settings
from app.store import decision_reads as log
from app.store.append.group_commit import Appender
from app.store.failures import is_database_away
from scheduler import tasks as t
from scheduler.autoscale import AutoscaleAdvisor, PidController
from scheduler.queue import TaskQueue
from scheduler.rows import tasks as rows

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SchedulerTimers:
    sweep_interval_s: float = 1.0
    autoscale_interval_s: float = 15.0
    task_retention_s: float = 0.0  # finished tasks' rows are kept this long; 0: for ever


def controller_from(settings: Settings) -> PidController:
    return PidController(
        target_s=settings.scheduler_target_latency_s,
        min_workers=settings.scheduler_min_workers,
        max_workers=settings.scheduler_max_workers,
        max_step=settings.scheduler_max_step,
    )


def timers_from(settings: Settings) -> SchedulerTimers:
    return SchedulerTimers(
        sweep_interval_s=settings.scheduler_sweep_interval_s,
        autoscale_interval_s=settings.scheduler_autoscale_interval_s,
        task_retention_s=settings.scheduler_task_retention_s,
    )


_PRUNE_BATCH = 500  # task rows deleted in one transaction


class SchedulerLoop:
    """``appender`` (group commit) appends the sweeper's decisions, so the log head is
    held only for the append, never across a whole sweep."""

    def __init__(
        self,
        engine: Engine,
        controller: PidController,
        timers: SchedulerTimers,
        appender: Appender,
    ) -> None:
        self._engine = engine
        self._controller = controller
        self._timers = timers
        self._appender = appender

    async def run(self) -> None:
        """Sweep and advise until cancelled; a failure is logged and the loop goes on,
        each job on its own: one that keeps failing stops neither of the others."""
        loop = asyncio.get_running_loop()
        next_advice = loop.time()
        while True:
            await _logging_failure("expiring leases", self.expire_leases())
            await _logging_failure("pruning finished tasks", self.prune_finished())
            if loop.time() >= next_advice:
                next_advice = loop.time() + self._timers.autoscale_interval_s
                await _logging_failure("advising", self.advise())
            await asyncio.sleep(self._timers.sweep_interval_s)

    async def expire_leases(self) -> int:
        expired = 0
        while True:
            async with self._engine.begin() as conn:
                found = await TaskQueue(conn, appender=self._appender).expire_leases(limit=20)
            expired += found
            if found < 20:
                return expired

    async def prune_finished(self, *, batches: int = 20) -> int:
        """Delete the rows of tasks finished longer ago than the retention period: batches
        of 500, each in its own transaction, until one comes back short (``batches`` at
        most, so a backlog, as after a rebuild, drains over a few sweeps)."""
        if not self._timers.task_retention_s:
            return 0
        before = datetime.now(UTC) - timedelta(seconds=self._timers.task_retention_s)
        pruned = 0
        for _ in range(batches):
            async with self._engine.begin() as conn:
                found = await prune_finished(conn, before, limit=_PRUNE_BATCH)
            pruned += found
            if found < _PRUNE_BATCH:
                break
        return pruned

    async def advise(self) -> int:
        """Step the controller of every active queue, each in a transaction of its own."""
        async with self._engine.connect() as conn:
            queues = await AutoscaleAdvisor(conn, self._controller).read_active_queues()
        advised = 0
        for tenant, queue in queues:
            advised += await _logging_failure(
                f"advising queue {queue!r} of tenant {tenant!r}", self._advise(tenant, queue), 0
            )
        return advised

    async def _advise(self, tenant: str, queue: str) -> int:
        async with self._engine.begin() as conn:
            advisor = AutoscaleAdvisor(conn, self._controller)
            return int(
                await advisor.advise(tenant, queue, interval_s=self._timers.autoscale_interval_s)
            )


async def _logging_failure(job: str, work: Awaitable[int], otherwise: int = 0) -> int:
    """``work``'s result; ``otherwise`` when it fails, logged (a line when the database is
    away, with the traceback when not)."""
    try:
        return await work
    except Exception as exc:
        if is_database_away(exc):
            logger.warning("scheduler: %s: database unavailable: %s", job, exc)
        else:
            logger.exception("scheduler: %s: unexpected failure", job)
        return otherwise


async def prune_finished(conn: Connection, before: datetime, *, limit: int) -> int:
    """Delete the rows of tasks that finished (completed, superseded, discarded) before
    ``before``, ``limit`` at most; their decisions stay in the log. Only rows the
    ``scheduler-tasks`` projection has passed go: it never meets a later event of
    theirs that would write one back. Safe to run in every process at once."""
    checkpoint = await log.read_checkpoint(conn, t.TASKS_PROJECTION)
    if checkpoint is None:
        return 0  # the projection has read nothing yet: every row may be written back
    return await rows.delete_finished(conn, before=before, up_to_position=checkpoint, limit=limit)
