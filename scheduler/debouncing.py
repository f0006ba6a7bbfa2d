"""Debouncing after the fact. The dispatcher supersedes only a pending task of a key
(``creation``): one leased when a newer event with its key came is passed over, and when
its attempt then failed or its lease ran out it was retried beside the newer task, and
offered first. Stale work ran twice, after newer work for its key was waiting or done.
Such a failure now supersedes the task by the newer one (``TaskQueue._after_failure``)."""

from __future__ import annotations

from app.db.engine import Connection
from scheduler import decisions as d
from scheduler.route_reads import RouteReader
from scheduler.rows import debounced
from scheduler.tasks import TaskState


async def newer_task(conn: Connection, state: TaskState) -> TaskState | None:
    """The newest task of ``state``'s debounce key triggered after it within its route's
    window (as the route debounces now, on the attribute the task was keyed by), in any
    state; None when there is none, or the task or its route does not debounce."""
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
