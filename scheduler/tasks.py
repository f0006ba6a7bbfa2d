"""A task's life as events, and the fold that turns them into its state.

Every decision about a task is a ``causeway.task.*`` event on the task's own stream
(``causeway:task:<id>``), caused by the decision before it (the first, ``created``, by the
event that triggered it). The fold below is the only definition of what a task's state
is: the queue table applies it as each decision is appended, and a rebuild applies it to
the whole log and gets the same rows. All times a decision depends on (when a lease
expires, when a retry may run, the jitter drawn) are in the event, never read from a
clock here, so the fold is deterministic.

Failure classes and what happens after the last attempt:

- ``data_invalid``: dead-lettered and archived, the input copied into the dead letter so a
  replay of ``causeway.task.dead_lettered`` exports it for training;
- ``model_version_mismatch``: dead-lettered; a rollback of the route's deployment
  ``service`` is proposed (an alert) or, when the route says ``rollback``, executed, and
  then the task is requeued;
- ``transient``, ``unknown`` and lease expiries: dead-lettered and flagged for attention
  (``causeway.alert.raised`` and the ``causeway_alerts`` gauge).
"""

from __future__ import annotations

import operator
import random
import uuid
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, Literal, get_args

from app.store.records import NewEvent

PREFIX = "causeway.task."
CREATED = PREFIX + "created"
SUPERSEDED = PREFIX + "superseded"
LEASED = PREFIX + "leased"
LEASE_EXTENDED = PREFIX + "lease_extended"
COMPLETED = PREFIX + "completed"
RETRIED = PREFIX + "retried"
DEAD_LETTERED = PREFIX + "dead_lettered"
REQUEUED = PREFIX + "requeued"
DISCARDED = PREFIX + "discarded"
TYPES = frozenset(
    {
        CREATED,
        SUPERSEDED,
        LEASED,
        LEASE_EXTENDED,
        COMPLETED,
        RETRIED,
        DEAD_LETTERED,
        REQUEUED,
        DISCARDED,
    }
)
ALERT_RAISED = "causeway.alert.raised"
SOURCE = "causeway:scheduler"

ErrorClass = Literal["data_invalid", "model_version_mismatch", "transient", "unknown"]
ERROR_CLASSES: tuple[ErrorClass, ...] = get_args(ErrorClass)

ARCHIVED = "archived"
ROLLBACK_PROPOSED = "rollback_proposed"
ROLLED_BACK = "rolled_back"
DEPLOYMENT_CHANGED = "deployment_changed"  # rolled back already since the task ran: requeued
ROLLBACK_FAILED = "rollback_failed"  # nothing to roll back to: an alert, the task stays dead
FLAGGED = "flagged"
NEEDS_ATTENTION = (FLAGGED, ROLLBACK_PROPOSED, ROLLBACK_FAILED)  # the alerts gauge

_NAMESPACE = uuid.UUID("5b0c6f64-7e0e-4f6b-9c1d-2f6a3c9e4d10")


@dataclass(frozen=True, slots=True)
class TaskState:
    tenant: str
    id: str
    route_id: str
    kind: str
    queue: str
    priority: int
    req_numbers: dict[str, float]
    req_flags: list[str]
    req_labels: dict[str, str]
    trigger_id: str
    trigger_type: str
    trigger_time: datetime
    debounce_key: str | None
    state: str
    attempts: int
    max_retries: int
    backoff_base_s: float
    service: str | None
    on_model_mismatch: str
    created_at: datetime
    available_at: datetime
    lease_id: str | None
    worker: str | None
    leased_at: datetime | None
    lease_expires_at: datetime | None
    error_class: str | None
    error: str | None
    disposition: str | None
    finished_at: datetime | None
    seq: int
    version: int
    position: int
    lease_request: str | None  # the worker's name for the request that leased it
    debounce_on: str | None  # the attribute ``debounce_key`` is the value of

    @property
    def stream(self) -> str:
        return stream_of(self.id)

    @property
    def last_decision_id(self) -> str:
        return decision_id(self.id, self.version)


FIELDS = tuple(field.name for field in fields(TaskState))
_AT = {name: n for n, name in enumerate(FIELDS)}
_values = operator.attrgetter(*FIELDS)


def _next(task: TaskState, position: int, /, **changes: Any) -> TaskState:
    """``task`` after its next decision, stored at ``position``, with ``changes`` (the
    fields named, ``state`` among them). Built in one go: the fold runs for every
    decision, twice (the command and the task book), and ``dataclasses.replace`` twice
    over took 20 us of its 22 (now 6)."""
    values = list(_values(task))
    values[_AT["version"]] = task.version + 1
    values[_AT["position"]] = position
    for name, value in changes.items():
        values[_AT[name]] = value
    return TaskState(*values)


def task_id_for(tenant: str, route_id: str, trigger_id: str) -> str:
    """The same trigger routed by the same route is always the same task."""
    return uuid.uuid5(_NAMESPACE, f"{tenant}\x00{route_id}\x00{trigger_id}").hex


TASKS_PROJECTION = "scheduler-tasks"  # the projection that folds the task rows


STREAM_PREFIX = "causeway:task:"  # a task's stream: this and its id


def stream_of(task_id: str) -> str:
    return f"{STREAM_PREFIX}{task_id}"


def decision_id(task_id: str, version: int) -> str:
    """The id of the task's ``version``-th decision: unique, and known without a lookup."""
    return f"causeway:task:{task_id}:{version}"


MAX_RETRY_DELAY_S = 86_400.0


def retry_delay_s(base_s: float, attempt: int, jitter: float) -> float:
    """Exponential backoff: ``base * 2**(attempt-1)``, at most a day (a route may allow
    100 retries of a 1 h base), then stretched by ``jitter`` (0-0.25): tasks whose backoff
    reached the cap still retry spread out, not all at the same instant."""
    return min(float(base_s * 2.0 ** (attempt - 1)), MAX_RETRY_DELAY_S) * (1 + jitter)


def draw_jitter() -> float:
    return round(random.uniform(0.0, 0.25), 4)  # noqa: S311 - spreading retries, not secrecy


def fold(
    state: TaskState | None, event_type: str, data: dict[str, Any], position: int
) -> TaskState:
    """The task after one of its events (``state`` is None before ``created``)."""
    if event_type == CREATED:
        return _created(data, position)
    if state is None:
        raise ValueError(f"{event_type} for task {data.get('task_id')!r}, which was never created")
    match event_type:
        case "causeway.task.superseded":
            return _next(state, position, state="superseded", finished_at=_time(data["at"]))
        case "causeway.task.leased":
            return _next(
                state,
                position,
                state="leased",
                attempts=int(data["attempt"]),
                lease_id=data["lease"],
                worker=data["worker"],
                leased_at=_time(data["at"]),
                lease_expires_at=_time(data["expires_at"]),
                lease_request=data.get("request"),
            )
        case "causeway.task.lease_extended":
            return _next(state, position, lease_expires_at=_time(data["expires_at"]))
        case "causeway.task.completed":
            return _next(
                state,
                position,
                state="completed",
                finished_at=_time(data["at"]),
                lease_id=None,
                lease_request=None,
            )
        case "causeway.task.retried":
            return _next(
                state,
                position,
                state="ready",
                available_at=_time(data["retry_at"]),
                lease_id=None,
                lease_request=None,
                error_class=data["class"],
                error=data["message"],
            )
        case "causeway.task.dead_lettered":
            return _next(
                state,
                position,
                state="dead",
                lease_id=None,
                lease_request=None,
                error_class=data["class"],
                error=data["message"],
                disposition=data["disposition"],
                finished_at=_time(data["at"]),
            )
        case "causeway.task.requeued":
            return _next(
                state,
                position,
                state="ready",
                attempts=0,
                available_at=_time(data["at"]),
                disposition=None,
                finished_at=None,
                lease_id=None,
                lease_request=None,
            )
        case "causeway.task.discarded":
            # A discarded task finished when it was discarded, not when it died: its
            # row's retention (``TaskQueue.prune_finished``) counts from then.
            return _next(
                state,
                position,
                state="discarded",
                disposition="discarded",
                finished_at=_time(data["at"]),
            )
    raise ValueError(f"{event_type} is not a task event")


def _created(data: dict[str, Any], position: int) -> TaskState:
    """A task as its ``created`` decision, stored at ``position``, makes it."""
    return TaskState(
        tenant=data["tenant"],
        id=data["task_id"],
        route_id=data["route"],
        kind=data["kind"],
        queue=data["queue"],
        priority=int(data["priority"]),
        req_numbers=dict(data["requires"]["numbers"]),
        req_flags=list(data["requires"]["flags"]),
        req_labels=dict(data["requires"]["labels"]),
        trigger_id=data["trigger"]["id"],
        trigger_type=data["trigger"]["type"],
        trigger_time=_time(data["trigger"]["time"]),
        debounce_key=data.get("debounce_key"),
        state="ready",
        attempts=0,
        max_retries=int(data["max_retries"]),
        backoff_base_s=float(data["backoff_base_s"]),
        service=data.get("service"),
        on_model_mismatch=data["on_model_mismatch"],
        created_at=_time(data["at"]),
        available_at=_time(data["at"]),
        lease_id=None,
        worker=None,
        leased_at=None,
        lease_expires_at=None,
        error_class=None,
        error=None,
        disposition=None,
        finished_at=None,
        seq=position,
        version=1,
        position=position,
        lease_request=None,
        debounce_on=data.get("debounce_on"),
    )


def created(
    *,
    tenant: str,
    task_id: str,
    route: dict[str, Any],
    priority: int,
    trigger: dict[str, Any],
    debounce_key: str | None,
    at: datetime,
    debounce_on: str | None = None,
) -> NewEvent:
    data = {
        "tenant": tenant,
        "task_id": task_id,
        "route": route["id"],
        "kind": route["kind"],
        "queue": route["queue"],
        "priority": priority,
        "requires": route["requires"],
        "trigger": trigger,
        "debounce_key": debounce_key,
        "max_retries": route["max_retries"],
        "backoff_base_s": route["backoff_base_s"],
        "service": route["service"],
        "on_model_mismatch": route["on_model_mismatch"],
        "at": at.isoformat(),
    }
    if debounce_key is not None and debounce_on is not None:
        data["debounce_on"] = debounce_on
    return NewEvent(
        id=decision_id(task_id, 1),
        source=SOURCE,
        type=CREATED,
        stream=stream_of(task_id),
        time=at.isoformat(),
        time_value=at,
        has_data=True,
        data=data,
        causes=(trigger["id"],),
        expected_version=0,
    )


def decision(
    state: TaskState,
    event_type: str,
    data: dict[str, Any],
    *,
    at: datetime,
    causes: tuple[str, ...] = (),
) -> NewEvent:
    """The task's next decision, caused by its previous one (and ``causes``)."""
    return NewEvent(
        id=decision_id(state.id, state.version + 1),
        source=SOURCE,
        type=event_type,
        stream=state.stream,
        time=at.isoformat(),
        time_value=at,
        has_data=True,
        data={"task_id": state.id, "queue": state.queue, **data, "at": at.isoformat()},
        causes=(state.last_decision_id, *causes),
        expected_version=state.version,
    )


def after_failure(
    state: TaskState, error_class: str, message: str, *, at: datetime, jitter: float
) -> tuple[str, dict[str, Any]]:
    """What a failed attempt leads to: a retry after backoff, or the dead-letter queue.

    A task runs at most ``1 + max_retries`` times; with the defaults (3 retries, base 1 s)
    the retries wait 1 s, 2 s and 4 s (each stretched by up to 25 % of jitter)."""
    if state.attempts <= state.max_retries:
        delay = retry_delay_s(state.backoff_base_s, state.attempts, jitter)
        return RETRIED, {
            "attempt": state.attempts,
            "class": error_class,
            "message": message,
            "delay_s": round(delay, 6),
            "jitter": jitter,
            "retry_at": (at + timedelta(seconds=delay)).isoformat(),
        }
    return DEAD_LETTERED, {
        "attempt": state.attempts,
        "class": error_class,
        "message": message,
        "disposition": disposition_for(state, error_class),
    }


def disposition_for(state: TaskState, error_class: str) -> str:
    if error_class == "data_invalid":
        return ARCHIVED
    if error_class == "model_version_mismatch" and state.service is not None:
        return ROLLED_BACK if state.on_model_mismatch == "rollback" else ROLLBACK_PROPOSED
    return FLAGGED


def alert(
    state: TaskState, kind: str, detail: dict[str, Any], *, at: datetime, cause: str
) -> NewEvent:
    return NewEvent(
        id=f"causeway:alert:{uuid.uuid4().hex}",
        source=SOURCE,
        type=ALERT_RAISED,
        stream=f"causeway:alert:{state.queue}",
        time=at.isoformat(),
        time_value=at,
        has_data=True,
        data={
            "kind": kind,
            "task_id": state.id,
            "queue": state.queue,
            "route": state.route_id,
            **detail,
        },
        causes=(cause,),
    )


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)
