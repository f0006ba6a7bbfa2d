"""The dead letters' rows: which tasks of the ``tasks`` table are dead, a page at a time
(``GET /dead-letters``), and locked for a bulk requeue (``POST /dead-letters/requeue``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import tasks
from scheduler.tasks import TaskState

_c = tasks.c


@dataclass(frozen=True, slots=True)
class DeadLetters:
    """Which dead letters: of ``queue``, failed with ``error_class``, dead since ``since``
    (each None: any)."""

    queue: str | None = None
    error_class: str | None = None
    since: datetime | None = None


async def read_dead_letters(
    conn: AsyncConnection,
    tenant: str,
    which: DeadLetters,
    *,
    after: tuple[datetime, str] | None = None,
    limit: int,
    lock: bool = False,
) -> list[TaskState]:
    """The oldest ``limit`` dead letters (by when they died, then id) that match, past
    ``after`` (the (finished_at, id) of the last one a page before held), on
    ``ix_tasks_dead``. ``lock``: their rows locked in this transaction, those another
    transaction holds skipped (an admin handling them one by one)."""
    statement = select(tasks).where(_c.tenant == tenant, _c.state == "dead")
    if after is not None:
        statement = statement.where(tuple_(_c.finished_at, _c.id) > tuple_(*after))
    if which.queue is not None:
        statement = statement.where(_c.queue == which.queue)
    if which.error_class is not None:
        statement = statement.where(_c.error_class == which.error_class)
    if which.since is not None:
        statement = statement.where(_c.finished_at >= which.since)
    statement = statement.order_by(_c.finished_at, _c.id).limit(limit)
    if lock:
        statement = statement.with_for_update(skip_locked=True)
    return [TaskState(*r) for r in await conn.execute(statement)]
