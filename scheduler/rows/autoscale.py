"""The ``queue_autoscale`` table (each queue's controller state and latest advice), and
the reads of ``tasks`` that measure a queue's latency (with its decisions in the log).

A queue's row is taken with ``SKIP LOCKED``, so processes advising at once never wait for
each other, and the active queues come in a fixed order, so they lock rows in one order.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, distinct, func, literal, select, union
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import queue_autoscale, tasks
from app.store import decision_reads as log
from scheduler.tasks import LEASED, stream_of

_a = queue_autoscale.c


@dataclass(frozen=True, slots=True)
class AutoscaleRow:
    """A queue's controller state: its advice, integral and error, and when it stepped."""

    recommended: int
    integral: float
    last_error: float
    observed_s: float
    updated_at: datetime


async def fetch_autoscale(conn: AsyncConnection, tenant: str, queue: str) -> AutoscaleRow | None:
    row = (
        await conn.execute(select(queue_autoscale).where(_a.tenant == tenant, _a.queue == queue))
    ).one_or_none()
    return None if row is None else _row(row)


async def fetch_autoscale_locked(
    conn: AsyncConnection, tenant: str, queue: str, *, seed: AutoscaleRow
) -> AutoscaleRow | None:
    """The queue's row, locked, made from ``seed`` if it has none; None when another
    transaction holds it."""
    await conn.execute(
        insert(queue_autoscale)
        .values(
            tenant=tenant,
            queue=queue,
            recommended=seed.recommended,
            integral=seed.integral,
            last_error=seed.last_error,
            observed_s=seed.observed_s,
            updated_at=seed.updated_at,
        )
        .on_conflict_do_nothing()
    )
    row = (
        await conn.execute(
            select(queue_autoscale)
            .where(_a.tenant == tenant, _a.queue == queue)
            .with_for_update(skip_locked=True)
        )
    ).one_or_none()
    return None if row is None else _row(row)


async def write_autoscale(
    conn: AsyncConnection, tenant: str, queue: str, state: AutoscaleRow
) -> None:
    await conn.execute(
        queue_autoscale.update()
        .where(_a.tenant == tenant, _a.queue == queue)
        .values(
            recommended=state.recommended,
            integral=state.integral,
            last_error=state.last_error,
            observed_s=state.observed_s,
            updated_at=state.updated_at,
        )
    )


async def read_active_queues(conn: AsyncConnection) -> list[tuple[str, str]]:
    """(tenant, queue) of every queue with work, or advised before, in a fixed order."""
    c = tasks.c
    active = union(
        select(c.tenant, c.queue).where(c.state.in_(("ready", "leased"))).distinct(),
        select(_a.tenant, _a.queue),
    ).subquery()
    rows = await conn.execute(select(active).order_by(active.c.tenant, active.c.queue))
    return [(row.tenant, row.queue) for row in rows]


async def read_latency_s(
    conn: AsyncConnection, tenant: str, queue: str, *, since: datetime, now: datetime
) -> float:
    """The longer of the mean wait (ready until leased) of the queue's leases granted
    after ``since``, and the age at ``now`` of its oldest ready task, to the millisecond.

    The waits are the log's (``decision_reads.mean_wait_s``: each ``leased`` decision
    less the one before it, which made the task ready: ``retry_at`` of a retry, else its
    ``at``, ``scheduler.tasks.fold``), not the row's: a retry or requeue moves the row's
    ``available_at`` past its ``leased_at``, so a task failed since its lease read as
    minus its backoff, and one leased twice in the window kept only its last wait. The
    rows say which tasks were leased in the window (a lease after ``since`` leaves
    ``leased_at`` after it)."""
    c = tasks.c
    leased = await conn.execute(
        select(c.id).where(c.tenant == tenant, c.queue == queue, c.leased_at > since)
    )
    waited = await log.mean_wait_s(
        conn,
        tenant,
        [stream_of(task_id) for task_id in leased.scalars()],
        entry_type=LEASED,
        since=since,
        ready_from=("retry_at", "at"),
    )
    oldest = (
        await conn.execute(
            select(func.min(c.available_at)).where(
                c.tenant == tenant,
                c.queue == queue,
                c.state == "ready",
                c.available_at <= literal(now),
            )
        )
    ).scalar()
    age = (now - oldest).total_seconds() if oldest is not None else 0.0
    return round(max(waited or 0.0, age, 0.0), 3)


async def count_busy_workers(
    conn: AsyncConnection, tenant: str, queue: str, *, now: datetime
) -> int:
    """The workers (by name) holding a lease of the queue's, unexpired at ``now``: busy
    with it. By name, not by task: a worker that leases batches holds many at once (one
    whose lease ran out has likely stopped)."""
    c = tasks.c
    count = await conn.scalar(
        select(func.count(distinct(c.worker))).where(
            c.tenant == tenant,
            c.queue == queue,
            c.state == "leased",
            c.lease_expires_at > literal(now),
        )
    )
    return int(count or 0)


def _row(row: Row[Any]) -> AutoscaleRow:
    return AutoscaleRow(
        row.recommended, row.integral, row.last_error, row.observed_s, row.updated_at
    )
