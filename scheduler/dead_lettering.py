"""What a dead letter brings beside its decision (``TaskQueue._after_failure``): an alert
for most failure classes, or, for a model mismatch, the rollback of the route's service
and the task's requeue behind it. Kept apart from the queue's commands: it reads the
deployment and the task's own log to decide (``decisions.roll_back``), writes nothing."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from app.db.engine import Connection
from app.store import decision_reads as log
from app.store import deployments as deployment_commands
from app.store.deployment_reads import DeploymentReader
from scheduler import debouncing
from scheduler import decisions as d
from scheduler import tasks as t

if TYPE_CHECKING:
    from app.store.records import NewEvent


async def failure_batch(
    conn: Connection,
    tenant: str,
    state: t.TaskState,
    event_type: str,
    data: dict[str, Any],
    error_class: str,
    message: str,
    *,
    now: datetime,
) -> list[NewEvent]:
    """The failure's decision and, for a dead letter, what its disposition brings, at
    ``now``: the time ``decisions.failure`` decided at, which a retry's ``retry_at`` runs
    from (a later reading of the clock made the wait it records longer than it was)."""
    dead_letter = t.decision_id(state.id, state.version + 1)
    disposition = data.get("disposition")
    follow: list[NewEvent] = []
    if disposition in (t.ROLLED_BACK, t.DEPLOYMENT_CHANGED, t.ROLLBACK_FAILED):
        disposition, follow = await _roll_back(conn, tenant, state, dead_letter, message, now=now)
        follow = await _unless_stale(conn, state, follow, now=now)
        data = {**data, "disposition": disposition}
    elif disposition is not None:
        follow = d.alerts_for(
            state, disposition, error_class, message, dead_letter=dead_letter, at=now
        )
    return [t.decision(state, event_type, data, at=now), *follow]


async def _unless_stale(
    conn: Connection, state: t.TaskState, follow: list[NewEvent], *, now: datetime
) -> list[NewEvent]:
    """``follow`` with the task's requeue behind a rollback superseded instead, by the
    newest task of its debounce key, when one came after it (its input is stale: as an
    operator's requeue is, ``debouncing.requeued``). The rollback stands: the mismatch
    was the model's."""
    requeue = next((e for e in follow if e.type == t.REQUEUED), None)
    if requeue is None or (newer := await debouncing.newer_task(conn, state)) is None:
        return follow
    dead = replace(state, version=state.version + 1)  # the state the requeue follows
    superseded = debouncing.superseded(
        dead, by=newer.trigger_id, by_task=newer.id, at=now, data=requeue.data
    )
    return [superseded if e is requeue else e for e in follow]


async def _roll_back(
    conn: Connection,
    tenant: str,
    state: t.TaskState,
    dead_letter: str,
    message: str,
    *,
    now: datetime,
) -> tuple[str, list[NewEvent]]:
    """Read what a model mismatch's rollback depends on: the service's deployment now,
    the version the task ran on, and the version its own last rollback left."""
    deployment = await DeploymentReader(conn).fetch_state(tenant, state.service or "")
    last_lease = await log.read_last(conn, tenant, state.stream, types=(t.LEASED,))
    ran_on = last_lease.data.get("deployment_version") if last_lease is not None else None
    # The last requeue onto another's rollback (an operator's requeue since, of the
    # dead letter, changed nothing the task runs on: it says nothing of the kind).
    requeue = await log.read_last(conn, tenant, state.stream, types=(t.REQUEUED,), having="onto")
    onto = requeue.data.get("onto") if requeue is not None else None
    effects = await log.read_effects(
        conn,
        tenant,
        state.stream,
        cause_type=t.DEAD_LETTERED,
        effect_type=deployment_commands.ROLLED_BACK,
    )
    return d.roll_back(
        state,
        deployment,
        message,
        ran_on=ran_on,
        own_rollback=d.own_rollback(effects, onto if isinstance(onto, int) else None),
        dead_letter=dead_letter,
        now=now,
    )
