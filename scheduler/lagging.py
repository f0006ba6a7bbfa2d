"""Task rows that lag the log: a command's decisions appended (the appender commits them
in a transaction of its own), then its transaction failed before its rows were written (a
lost connection, a statement or lock timeout, a deadlock). Its client got a 503 that
says sending it again writes nothing twice, and the rows show the task as it was until
``TaskBook`` catches them up.

A command sent again meanwhile finds its row still leased under its lease, decides again,
and the log refuses that decision (its id and stream version are taken); or it finds the
row not leased under its lease when the log says it is. Either way the command asks the
log (``caught_up``) before it answers so: the task folded from its stream, its row
(locked by the command) written so, and the command decides again on that, where a
re-send is recognised as one. A row that holds every decision costs nothing more: the
log is read only once the row's answer was a refusal.

A lease request sent again under its ``request_id`` finds its leases in the rows; its
first try's leases, in the log only, are found by ``held_in_log``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

from app.db.engine import Connection
from app.errors import IdConflict, LeaseLost, VersionConflict
from scheduler import debouncing
from scheduler import tasks as t
from scheduler.rows import tasks as rows


async def caught_up(conn: Connection, tenant: str, row: t.TaskState | None) -> t.TaskState | None:
    """The task of ``row`` (locked by this transaction) as the log has it, its row written
    so, when the row lacks a decision of the log; None when it lacks none (or there is no
    row)."""
    if row is None:
        return None
    logged = await debouncing.as_logged(conn, tenant, row)
    if logged.position <= row.position:
        return None
    await rows.write_task(conn, logged)
    return logged


T = TypeVar("T")


async def deciding(
    conn: Connection,
    tenant: str,
    row: t.TaskState | None,
    decide: Callable[[t.TaskState | None], Awaitable[T]],
) -> T:
    """``decide`` on ``row`` (locked by this transaction); refused (the lease lost, or the
    log's stream version or decision id taken) on a row that lags the log, ``decide``
    once more on the task as the log has it (``caught_up``)."""
    try:
        return await decide(row)
    except (LeaseLost, VersionConflict, IdConflict):
        if (logged := await caught_up(conn, tenant, row)) is None:
            raise
        return await decide(logged)


async def held_in_log(conn: Connection, tenant: str, held_by: rows.HeldBy) -> list[t.TaskState]:
    """The tasks lease request ``held_by`` leased (its worker, in its queue) whose rows do
    not show it yet, and which it still holds (unexpired, leased under it), as the log has
    them: their rows locked (in id order, as the commands lock theirs) and caught up; best
    first, as the lease scan orders them. Read once no other try of the request is under
    way (the caller holds its lock: ``rows.fetch_held_by_request``)."""
    lagging = await rows.fetch_leased_unwritten(conn, tenant, held_by)
    if not lagging:
        return []
    locked, _ = await rows.fetch_tasks_locked(conn, tenant, sorted(lagging))
    held = []
    for row in locked.values():
        logged = await caught_up(conn, tenant, row) or row
        if logged is not None and _is_held(logged, held_by, held_by.now):
            held.append(logged)
    held.sort(key=lambda s: (-s.priority, s.seq))
    return held


def _is_held(state: t.TaskState, held_by: rows.HeldBy, now: datetime) -> bool:
    return (
        state.state == "leased"
        and state.lease_request == held_by.request
        and state.worker == held_by.worker
        and state.queue == held_by.queue
        and state.lease_expires_at is not None
        and state.lease_expires_at > now
    )
