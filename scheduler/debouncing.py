"""Debouncing after the fact. The dispatcher supersedes only a pending task of a key
(``creation``): one leased when a newer event with its key came is passed over, and when
its attempt then failed or its lease ran out it was retried beside the newer task, and
offered first. Stale work ran twice, after newer work for its key was waiting or done.
Such a failure now supersedes the task by the newer one (``TaskQueue._after_failure``).

A dead letter is passed over the same way, and an operator's requeue of it put its stale
input back in the queue after the newer task of its key (waiting, running or done): that
requeue, one by one or in bulk (``scheduler.requeue``), now supersedes it too
(``requeued``), keeping who requeued it and why.

A command putting a task back in the queue and the dispatcher making a newer task of its
key at the same moment each looked before the other had written, and the stale task ran
beside the newer one. The dispatcher now holds the log head from its look to its commit
and finds such a decision in the log (``creation``); the command looks again after its
append (``TaskQueue.unless_newer``): whichever appends second sees the other."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from app.db.engine import Connection
from app.store import decision_reads as log
from scheduler import decisions as d
from scheduler import tasks as t
from scheduler.route_reads import RouteReader
from scheduler.rows import debounced

if TYPE_CHECKING:
    from app.store.records import NewEvent


async def newer_task(conn: Connection, state: t.TaskState) -> t.TaskState | None:
    """The newest task of ``state``'s debounce key triggered after it within its route's
    window (as the route debounces now, on the attribute the task was keyed by) whose
    input stands (waiting, running, done or dead: not discarded nor superseded); None
    when there is none, or the task or its route does not debounce."""
    if state.debounce_key is None:
        return None
    route = await RouteReader(conn).read_route(state.tenant, state.route_id)
    debounce = route.get("debounce") if route is not None else None
    if not isinstance(debounce, dict):
        return None
    attribute = debounce.get("key")
    if not isinstance(attribute, str) or state.debounce_on not in (None, attribute):
        return None
    _, before = d.debounce_window(state.trigger_time, float(debounce["window_s"]))
    return await debounced.fetch_newer_debounced(
        conn, state.tenant, state.route_id, attribute, state.debounce_key,
        after=state, before=before,
    )  # fmt: skip


def superseded(
    state: t.TaskState,
    *,
    by: str,
    by_task: str,
    at: datetime,
    data: Mapping[str, object] | None = None,
) -> NewEvent:
    """The decision ending ``state`` because the event ``by`` (whose task is ``by_task``)
    came with its key inside the window, caused by that event too; ``data`` says what
    else ended it (a failed attempt's report, a requeue's actor and reason)."""
    body = {"by": by, "by_task": by_task, **(data or {})}
    return t.decision(state, t.SUPERSEDED, body, at=at, causes=(by,))


async def requeued(
    conn: Connection, state: t.TaskState, data: dict[str, Any], *, at: datetime
) -> NewEvent:
    """The decision an operator's requeue of the dead letter ``state`` takes (``data``:
    who and why): ``causeway.task.requeued``, or superseded by the newest task of its key
    when one came after it (``newer_task``)."""
    newer = await newer_task(conn, state)
    if newer is None:
        return t.decision(state, t.REQUEUED, data, at=at)
    return superseded(state, by=newer.trigger_id, by_task=newer.id, at=at, data=data)


async def as_logged(conn: Connection, tenant: str, state: t.TaskState) -> t.TaskState:
    """``state``'s task as its decisions in the log leave it: a decision its row does not
    show yet (the dispatcher superseded it there, its row locked) included."""
    folded: t.TaskState | None = None
    for entry in await log.read_stream(conn, tenant, state.stream):
        folded = t.fold(folded, entry.type, entry.data, entry.position)
    return folded or state
