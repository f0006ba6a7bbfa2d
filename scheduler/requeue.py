"""Requeue dead letters in bulk: the oldest that match a filter, each put back in its queue
by a decision of its own (``causeway.task.requeued``, attempts reset), all appended as one
group, as a dead-letter queue's "redrive" does once the cause of the failures is fixed. A
dead letter of a debounced key for which a newer task came since is superseded by that
task instead, as a requeue of it alone is (``debouncing.requeued``): its input is stale.

The rows are locked in the caller's transaction (``SKIP LOCKED``: dead letters an admin
is requeueing or discarding one by one are left to that admin), so no dead letter is
requeued twice. A row that lags its task's log (its process died between an append and
the row's write) spoils the group: the tasks are then requeued one at a time, and one
whose decision conflicts is left dead for the next request.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from app.db.engine import Connection
from app.errors import AppError, IdConflict, VersionConflict
from scheduler import debouncing
from scheduler import tasks as t
from scheduler.queue import TaskQueue
from scheduler.rows import tasks as rows
from scheduler.rows import wakeups
from scheduler.rows.dead_letters import DeadLetters, read_dead_letters

if TYPE_CHECKING:
    from app.store.append.group_commit import Appender

MAX_REQUEUE = 100  # dead letters one request requeues at most


async def requeue_dead_letters(
    conn: Connection,
    decisions: Appender,
    tenant: str,
    which: DeadLetters,
    *,
    limit: int,
    reason: str | None,
    actor: str,
) -> tuple[list[t.TaskState], bool]:
    """Requeue the oldest ``limit`` dead letters of ``which`` (in ``conn``'s transaction),
    or supersede those a newer task of their debounce key came after; the tasks after,
    oldest first, and whether more matched."""
    found = await read_dead_letters(conn, tenant, which, limit=limit + 1, lock=True)
    chosen = found[:limit]
    if not chosen:
        return [], False
    now = datetime.now(UTC)
    data = {"reason": reason, "actor": actor}
    batch = [await debouncing.requeued(conn, state, data, at=now) for state in chosen]
    more = len(found) > limit
    try:
        appended = await decisions.append(tenant, batch)
    except (VersionConflict, IdConflict):
        return await _one_at_a_time(conn, decisions, tenant, chosen, reason, actor), more
    after = [
        t.fold(state, event.type, event.data, where.position)
        for state, event, where in zip(chosen, batch, appended, strict=True)
    ]
    await rows.write_tasks(conn, after)
    # Each looks again for a newer task of its key, made since it looked (as one alone).
    queue = TaskQueue(conn, appender=decisions)
    after = [await queue.unless_newer(tenant, state) for state in after]
    if any(state.state == "ready" for state in after):
        await wakeups.announce_ready(conn)  # the appender's hint may come before the rows
    return after, more


async def _one_at_a_time(
    conn: Connection,
    decisions: Appender,
    tenant: str,
    chosen: list[t.TaskState],
    reason: str | None,
    actor: str,
) -> list[t.TaskState]:
    queue = TaskQueue(conn, appender=decisions)
    requeued = []
    for state in chosen:
        try:
            requeued.append(await queue.requeue(tenant, state.id, reason=reason, actor=actor))
        except AppError:  # its row lags its log: left dead, the next request tries again
            continue
    return requeued
