"""What the queue's commands decide, given what they read: pure functions, no I/O.

``scheduler.queue`` reads a task's row and the log, asks these what follows (which band
of priorities a worker may lease, whether a lease is still held, what a failure brings),
and appends and writes what they answer; ``scheduler.tasks`` folds the decisions into
the task's state. The clock is an argument, never read here.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from app.errors import AppError, Conflict, LeaseLost, NotFound
from app.store import deployments as deployment_commands
from app.store.records import NewEvent
from app.telemetry.tracing import TraceContext
from scheduler import tasks as t
from scheduler.placement import GUARANTEED_ABOVE, OffPeak, WorkerProfile
from scheduler.routes import SCHEDULER_ACTOR

if TYPE_CHECKING:
    from app.store.decision_reads import CausedEffect, EventContent, LoggedEntry
    from app.store.deployments import DeploymentState

_EARLIEST = datetime.min.replace(tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)


def lease_band(profile: WorkerProfile, off_peak: OffPeak | None, now: datetime) -> tuple[int, int]:
    """The lowest and highest priority ``profile`` may lease at ``now``."""
    if profile.spot:
        return 0, GUARANTEED_ABOVE  # guaranteed work never goes to spot capacity
    if off_peak is not None and off_peak.is_active(now):
        return off_peak.max_priority + 1, 9  # low-priority work waits for spot workers
    return 0, 9


def lease_data(
    state: t.TaskState,
    profile: WorkerProfile,
    lease_id: str,
    *,
    expires: datetime,
    deployment_version: int | None,
    request: str | None = None,
) -> dict[str, Any]:
    """The data of the decision that leases ``state`` to ``profile``; with the version of
    the service's deployment when the task has a service: a model mismatch rolls back
    only that, never a later version someone else rolled to; and with the worker's name
    for the lease request, when it gave one (``request``: the same request sent again
    finds this lease)."""
    data: dict[str, Any] = {
        "lease": lease_id,
        "worker": profile.worker,
        "attempt": state.attempts + 1,
        "expires_at": expires.isoformat(),
        "spot": profile.spot,
        "labels": profile.labels,
    }
    if deployment_version is not None:
        data["deployment_version"] = deployment_version
    if request is not None:
        data["request"] = request
    return data


def holding(state: t.TaskState | None, task_id: str, lease_id: str, now: datetime) -> t.TaskState:
    """``state``, when the task is leased under ``lease_id`` and the lease has not run out."""
    if state is None:
        raise NotFound(f"no task {task_id!r}", task=task_id)
    expired = state.lease_expires_at is not None and state.lease_expires_at < now
    if state.state != "leased" or state.lease_id != lease_id or expired:
        raise LeaseLost(
            f"task {task_id!r} is {state.state}"
            # A task that left "leased" holds no lease at all, not another one.
            + (
                " under another lease"
                if state.state == "leased" and state.lease_id != lease_id
                else ""
            )
            + ("; the lease expired" if expired and state.lease_id == lease_id else "")
            + "; this lease is no longer held",
            task=task_id,
            state=state.state,
        )
    return state


def dead_letter(state: t.TaskState | None, task_id: str) -> t.TaskState:
    """``state``, when the task is dead-lettered."""
    if state is None:
        raise NotFound(f"no task {task_id!r}", task=task_id)
    if state.state != "dead":
        raise Conflict(f"task {task_id!r} is {state.state}, not dead-lettered", task=task_id)
    return state


def granted_s(last_grant: LoggedEntry | None) -> float | None:
    """How long the lease was granted for by ``last_grant`` (the task's lease or its last
    extension: each records when it was made and when the lease ends)."""
    data = last_grant.data if last_grant is not None else None
    if not isinstance(data, dict) or data.get("at") is None or data.get("expires_at") is None:
        return None
    granted = datetime.fromisoformat(data["expires_at"]) - datetime.fromisoformat(data["at"])
    return granted.total_seconds() if granted.total_seconds() > 0 else None


def extended_expiry(
    state: t.TaskState, *, lease_s: float, max_lease_s: float, now: datetime
) -> datetime:
    """``lease_s`` from now, ``max_lease_s`` at most; never sooner than the lease ends
    already, so a heartbeat cannot hand a running task back."""
    expires = now + timedelta(seconds=min(lease_s, max_lease_s))
    if state.lease_expires_at is not None:
        expires = max(expires, state.lease_expires_at)
    return expires


def caused_by_trigger(
    state: t.TaskState,
    results: Sequence[NewEvent],
    traces: Mapping[str, TraceContext] | None = None,
) -> list[NewEvent]:
    """``results``, each caused by the task's trigger besides its own causes. ``traces``:
    the stored trace contexts of triggers; a result that carries no ``traceparent`` of its
    own carries its trigger's (the CloudEvents Distributed Tracing extension carries the
    starting trace across hops), so its trace continues the trigger's."""
    context = (traces or {}).get(state.trigger_id)
    return [
        _carrying(replace(e, causes=tuple(dict.fromkeys((*e.causes, state.trigger_id)))), context)
        for e in results
    ]


def _carrying(event: NewEvent, context: TraceContext | None) -> NewEvent:
    if context is None or "traceparent" in event.extensions:
        return event
    traceparent, tracestate = context
    # The pair travels together: a tracestate of the result's own belongs to no trace it
    # names, and is not kept beside the trigger's traceparent.
    extensions = {k: v for k, v in event.extensions.items() if k != "tracestate"}
    extensions["traceparent"] = traceparent
    if tracestate is not None:
        extensions["tracestate"] = tracestate
    return replace(event, extensions=extensions)


def completion(
    state: t.TaskState, lease_id: str, caused: Sequence[NewEvent], *, at: datetime
) -> NewEvent:
    return t.decision(
        state,
        t.COMPLETED,
        {"lease": lease_id, "worker": state.worker, "results": [e.id for e in caused]},
        at=at,
        causes=tuple(dict.fromkeys(e.id for e in caused)),  # a result sent twice is one
    )


def completed_data(entry: LoggedEntry | None) -> dict[str, Any] | None:
    """The data of ``entry`` when it is a completion."""
    if entry is None or entry.type != t.COMPLETED or not isinstance(entry.data, dict):
        return None
    return entry.data


def check_same_results(state: t.TaskState, first: dict[str, Any], caused: list[NewEvent]) -> None:
    """Refuse ``caused`` unless they are the results of the completion ``first``: the same
    ids in the same order."""
    stored = first.get("results")
    if [e.id for e in caused] != stored:
        named = ", ".join(repr(i) for i in stored or []) or "none"
        raise Conflict(
            f"task {state.id!r} was completed under this lease with other results "
            f"({named}); a retry must send the same results",
            task=state.id,
        )


def failure(
    state: t.TaskState,
    error_class: str,
    message: str,
    *,
    at: datetime,
    jitter: float,
    retry_now: bool,
) -> tuple[str, dict[str, Any]]:
    """The decision after a failed attempt (a retry, or a dead letter), and its data; a
    retry at once when ``retry_now`` (the lease expired: the attempt waited already)."""
    event_type, data = t.after_failure(state, error_class, message, at=at, jitter=jitter)
    if retry_now and event_type == t.RETRIED:
        data = {**data, "delay_s": 0.0, "retry_at": at.isoformat()}
    return event_type, data


def is_failure_reported(
    entry: LoggedEntry | None, lease_id: str, error_class: str, message: str
) -> bool:
    """Whether ``entry`` (a task's last failure) is the report of ``error_class`` and
    ``message`` under ``lease_id``."""
    if entry is None or not isinstance(entry.data, dict):
        return False
    data = entry.data
    return (data.get("lease"), data.get("class"), data.get("message")) == (
        lease_id,
        error_class,
        message,
    )


def archived_input(event_id: str, content: EventContent | None) -> dict[str, Any] | None:
    """The trigger as a dead letter keeps it: its id, type, source, content type and
    data; binary data as ``data_base64``, as CloudEvents' JSON format writes it."""
    if content is None:
        return None
    found = {
        "id": event_id,
        "type": content.type,
        "source": content.source,
        "datacontenttype": content.datacontenttype,
    }
    if content.data_binary is not None:
        return {**found, "data_base64": base64.b64encode(content.data_binary).decode("ascii")}
    return {**found, "data": content.data}


def alerts_for(
    state: t.TaskState,
    disposition: str,
    error_class: str,
    message: str,
    *,
    dead_letter: str,
    at: datetime,
) -> list[NewEvent]:
    """The alert a flagged dead letter or a proposed rollback raises (none otherwise)."""
    match disposition:
        case t.FLAGGED:
            detail = {"class": error_class, "message": message, "attempts": state.attempts}
            return [t.alert(state, "dead_letter", detail, at=at, cause=dead_letter)]
        case t.ROLLBACK_PROPOSED:
            detail = {
                "service": state.service,
                "proposal": f"roll back the deployment of service {state.service!r}",
                "message": message,
            }
            return [t.alert(state, "rollback_proposed", detail, at=at, cause=dead_letter)]
    return []


def own_rollback(effects: list[CausedEffect], requeued_onto: int | None = None) -> int | None:
    """The deployment version the task's last rollback left (the stream version of the
    rollback its dead letter caused), or the one another task's rollback requeued it
    onto (``requeued_onto``, from the last requeue that says so), whichever is later; None when
    neither; ``effects`` are the deployments rolled back by the task's dead letters."""
    versions = [
        e.effect_stream_version
        for e in effects
        if isinstance(e.cause_data, dict) and e.cause_data.get("disposition") == t.ROLLED_BACK
    ]
    if requeued_onto is not None:
        versions.append(requeued_onto)
    return max(versions, default=None)


def roll_back(
    state: t.TaskState,
    deployment: DeploymentState,
    message: str,
    *,
    ran_on: int | None,
    own_rollback: int | None,
    dead_letter: str,
    now: datetime,
) -> tuple[str, list[NewEvent]]:
    """What follows the dead letter of a model mismatch, and the disposition it gets:
    the rollback of the route's service and the task's requeue behind it; only a
    requeue when the versions serving changed since the task ran (``ran_on``, the
    deployment's stream version then: someone, perhaps another failing task, rolled it
    back or promoted already; a traffic shift alone changes nothing the task ran on); an
    alert when there is nothing to roll back to, or when the deployment is still the one
    the task's own rollback left, or the one another's rollback requeued it onto
    (``own_rollback``: that deployment's stream version)."""
    service = state.service or ""  # set: the disposition is only chosen with a service
    dead = replace(state, version=state.version + 1)  # the state a requeue follows
    if ran_on is not None and ran_on < deployment.versions_changed_at:
        reason = f"service {service!r} changed since the task ran; it runs again on that"
        data: dict[str, Any] = {"reason": reason, "actor": "scheduler"}
        if (
            deployment.rolled_back_at == deployment.versions_changed_at
            and deployment.rolled_back_by == SCHEDULER_ACTOR
        ):
            # The deployment it is requeued onto is another task's rollback, which it
            # takes for its own (``own_rollback``): failing so again there, it does not
            # roll back further. (Onto an operator's rollout, promotion or rollback, it
            # may: nobody rolled back the version it then fails on.)
            data["onto"] = deployment.stream_version
        requeue = t.decision(dead, t.REQUEUED, data, at=now)
        return t.DEPLOYMENT_CHANGED, [requeue]
    if own_rollback is not None and own_rollback >= deployment.versions_changed_at:
        # It failed again on the deployment its own rollback left: rolling back once
        # more would walk the service back through every stable version it had.
        detail = {
            "class": "model_version_mismatch",
            "message": message,
            "attempts": state.attempts,
            "why": f"the task rolled service {service!r} back once already (or was "
            "requeued onto this deployment by another task's rollback); "
            "it is not rolled back again",
        }
        return t.FLAGGED, [t.alert(state, "dead_letter", detail, at=now, cause=dead_letter)]
    try:
        if deployment.stable_version is None and deployment.candidate_version is not None:
            # Its only version, in rollout: dropping it would leave the service serving
            # nothing, and the task requeued onto no model at all.
            raise Conflict(f"service {service!r} has no stable version to roll back to")
        if (
            deployment.candidate_version is not None
            and deployment.candidate_percent == 0
            and (ran_on is None or deployment.candidate_idle_since <= ran_on)
        ):
            # A canary paused since before the lease served nothing: the stable version
            # ran the task, and a rollout under way has no rollback of it. Dropping the
            # canary would spare the version that failed; the operator decides. (One
            # paused after the lease took its share while the task ran: it is dropped.)
            raise Conflict(
                f"service {service!r}'s candidate {deployment.candidate_version!r} takes no "
                f"traffic: its stable version {deployment.stable_version!r} ran the task, "
                "and it is not rolled back while a rollout is under way"
            )
        rollback = deployment_commands.rollback(
            deployment,
            reason=f"task {state.id} failed with model_version_mismatch: {message}"[:500],
            actor=SCHEDULER_ACTOR,
        )
    except AppError as refused:
        detail = {"service": state.service, "why": refused.detail}
        return t.ROLLBACK_FAILED, [
            t.alert(state, "rollback_failed", detail, at=now, cause=dead_letter)
        ]
    rollback = replace(rollback, causes=(dead_letter,))
    requeue = t.decision(
        dead,
        t.REQUEUED,
        {"reason": f"service {service!r} rolled back", "actor": "scheduler"},
        at=now,
        causes=(rollback.id,),
    )
    return t.ROLLED_BACK, [rollback, requeue]


def debounce_window(trigger_time: datetime, window_s: float) -> tuple[datetime, datetime]:
    """The times strictly between which a pending task with the same key is debounced."""
    window = timedelta(seconds=window_s)
    return _shifted(trigger_time, -window), _shifted(trigger_time, window)


def _shifted(at: datetime, by: timedelta) -> datetime:
    """``at + by``, held to the years datetime can hold: an event may be timed at
    0001-01-01 or 9999-12-31 (RFC 3339 allows either), and a window around it that
    overflowed stopped the dispatcher at that event for every tenant."""
    try:
        return at + by
    except OverflowError:
        return _EARLIEST if by < timedelta(0) else _LATEST
