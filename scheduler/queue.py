"""The task queue: every command that changes a task, and the reads over the queue table.

A command runs in the caller's transaction: it locks the task's row, appends its decision
to the log, and writes the row that decision folds to (``tasks.fold``). Appending goes
through the group-commit ``Appender`` for the HTTP commands, so concurrent leases and
completions share one append transaction and its fsync, while each holds its own row
lock until it has written the row; the dispatcher and the sweeper append in their own
transaction. A row is never written back to an older decision (the upsert compares
positions), and ``TaskBook`` follows the log too, so if a process dies between an
append and its row write, the row catches up; a command that meets such a row meanwhile
gets a version conflict on the task's stream, never a second lease.

Locks are taken in one order, task rows before the log head, so commands never deadlock;
the dispatcher, which holds the log head when it supersedes a pending task, takes task
rows with ``SKIP LOCKED`` and never waits for one. Leasing walks ``ix_tasks_ready`` in
priority-then-age order with ``FOR UPDATE SKIP LOCKED``: concurrent leasers each take a
different row, and none waits for another.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb
from sqlalchemy import and_, any_, bindparam, delete, func, literal_column, select, text
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, insert
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.types import Text

from app.db.engine import DriverStatement
from app.db.tables import event_causes, events, projection_checkpoints, routes, tasks
from app.errors import AppError, Conflict, IdConflict, LeaseLost, NotFound, VersionConflict
from app.store import deployments as deployment_commands
from app.store.append.group_commit import Appender
from app.store.chain import ChainRecord
from app.store.deployment_reads import DeploymentReader
from app.store.log import EventLog
from app.store.reads import EventReader
from app.store.records import Appended, NewEvent
from scheduler import tasks as t
from scheduler.placement import GUARANTEED_ABOVE, OffPeak, WorkerProfile
from scheduler.routes import Route, event_time

_c = tasks.c
_LEASE_TRIES = 5
# The hot statements, built once. A task fits a worker when each numeric requirement is at
# most the worker's capability of that name (0 when it reports none: a requirement of 0
# asks for nothing), its flags are among the worker's true flags, and its labels among the
# worker's labels (see scheduler.placement).
_FITS = text(
    "NOT EXISTS (SELECT 1 FROM jsonb_each_text(tasks.req_numbers) AS need "
    "WHERE coalesce((CAST(:numbers AS jsonb) ->> need.key)::float8, 0) < need.value::float8)"
).bindparams(bindparam("numbers", type_=JSONB))
_LEASE = (
    select(tasks)
    .where(
        _c.tenant == bindparam("tenant"),
        _c.queue == bindparam("queue"),
        # Written out, not a parameter: a generic plan can use ix_tasks_ready's predicate.
        _c.state == literal_column("'ready'"),
        _c.available_at <= bindparam("now"),
        _FITS,
        _c.req_flags.op("<@")(bindparam("flags", type_=ARRAY(Text))),
        _c.req_labels.op("<@")(bindparam("labels", type_=JSONB)),
        _c.priority.between(bindparam("lowest"), bindparam("highest")),
        ~(
            _c.id == any_(bindparam("skip", type_=ARRAY(Text)))
        ),  # not = ANY: an empty list skips none
    )
    .order_by(_c.priority.desc(), _c.seq)
    .limit(literal_column("1"))  # written out too: a generic plan then reads the index in order
    .with_for_update(skip_locked=True)
)
_FETCH = select(tasks).where(_c.tenant == bindparam("tenant"), _c.id == bindparam("id"))
# What workers' commands (lease, complete, heartbeat, fail) and the task book run for
# every task, on the driver (``DriverStatement``): a task takes a dozen statements. Every
# task row, these and SQLAlchemy's, comes in TaskState's field order, which is the table's.
_LEASE_ON_DRIVER = DriverStatement.of(_LEASE)
_FETCH_ON_DRIVER = DriverStatement.of(_FETCH)
_FETCH_LOCKED_ON_DRIVER = DriverStatement.of(_FETCH.with_for_update())
_CREATED = select(events.c.position).where(
    events.c.tenant == bindparam("tenant"), events.c.id == bindparam("id")
)
# Written out as ix_tasks_finished's predicate, so that every plan (a generic one too) can
# use the index: a bound array would match it only once planned for its values.
_FINISHED = text("tasks.state IN ('completed', 'superseded', 'discarded')")
_TASKS_CHECKPOINT = (
    select(projection_checkpoints.c.position)
    .where(projection_checkpoints.c.name == t.TASKS_PROJECTION)
    .scalar_subquery()
)
_FETCH_POSITION = DriverStatement.of(
    select(_c.position).where(_c.tenant == bindparam("tenant"), _c.id == bindparam("id"))
)


@dataclass(frozen=True, slots=True)
class Lease:
    task: t.TaskState
    lease_id: str
    expires_at: datetime
    trigger: str  # the trigger event, structured CloudEvent JSON


@dataclass(frozen=True, slots=True)
class QueueDepth:
    queue: str
    ready_by_priority: dict[int, int]
    delayed: int
    in_flight: int
    dead_letters: int
    alerts: int
    oldest_ready_s: float

    @property
    def ready(self) -> int:
        return sum(self.ready_by_priority.values())


class TaskQueue:
    """Commands and reads over the queue on ``conn`` (the caller's transaction).

    Decisions are appended by ``appender`` when given (group commit: concurrent commands
    share one append transaction and its fsync, while each keeps its row locked in its own
    transaction), else in ``conn``'s transaction (the dispatcher, the sweeper).
    """

    def __init__(self, conn: AsyncConnection, *, appender: Appender | None = None) -> None:
        self._conn = conn
        self._append = appender.append if appender is not None else EventLog(conn).append

    # -- reads -----------------------------------------------------------------------

    async def fetch(self, tenant: str, task_id: str, *, lock: bool = False) -> t.TaskState | None:
        statement = _FETCH_LOCKED_ON_DRIVER if lock else _FETCH_ON_DRIVER
        row = await statement.first(self._conn, tenant=tenant, id=task_id)
        if row is None and lock:
            # A rebuild of the tasks read model deletes every row and inserts it again in
            # one transaction: a lock that waited for it finds the old row deleted, and
            # only a statement begun after the rebuild committed sees the new one.
            row = await statement.first(self._conn, tenant=tenant, id=task_id)
        return t.TaskState(*row) if row is not None else None

    async def fetch_position(self, tenant: str, task_id: str) -> int | None:
        """The position of the last decision written to the task's row."""
        row = await _FETCH_POSITION.first(self._conn, tenant=tenant, id=task_id)
        return None if row is None else int(row[0])

    async def read_dead_letters(
        self,
        tenant: str,
        *,
        queue: str | None,
        error_class: str | None,
        since: datetime | None,
        limit: int,
    ) -> list[t.TaskState]:
        statement = select(tasks).where(_c.tenant == tenant, _c.state == "dead")
        if queue is not None:
            statement = statement.where(_c.queue == queue)
        if error_class is not None:
            statement = statement.where(_c.error_class == error_class)
        if since is not None:
            statement = statement.where(_c.finished_at >= since)
        rows = await self._conn.execute(statement.order_by(_c.finished_at, _c.id).limit(limit))
        return [t.TaskState(*r) for r in rows]

    async def read_depths(self, tenant: str, *, now: datetime) -> list[QueueDepth]:
        ready = and_(_c.state == "ready", _c.available_at <= now)
        rows = await self._conn.execute(
            select(
                _c.queue,
                _c.priority,
                func.count().filter(ready).label("ready"),
                func.count().filter(_c.state == "ready", _c.available_at > now).label("delayed"),
                func.count().filter(_c.state == "leased").label("in_flight"),
                func.count().filter(_c.state == "dead").label("dead"),
                func.count()
                .filter(_c.state == "dead", _c.disposition.in_(t.NEEDS_ATTENTION))
                .label("alerts"),
                func.min(_c.available_at).filter(ready).label("oldest"),
            )
            .where(_c.tenant == tenant, _c.state.in_(("ready", "leased", "dead")))
            .group_by(_c.queue, _c.priority)
        )
        # Queues of the routes, too, so an idle queue reads as zeros rather than vanishing.
        routed = await self._conn.execute(
            select(routes.c.spec["queue"].astext)
            .where(routes.c.tenant == tenant, routes.c.spec["queue"].astext.is_not(None))
            .distinct()
        )
        found = {q: QueueDepth(q, {}, 0, 0, 0, 0, 0.0) for (q,) in routed}
        for row in rows:
            depth = found.get(row.queue) or QueueDepth(row.queue, {}, 0, 0, 0, 0, 0.0)
            by_priority = dict(depth.ready_by_priority)
            if row.ready:
                by_priority[int(row.priority)] = int(row.ready)
            age = (now - row.oldest).total_seconds() if row.oldest is not None else 0.0
            found[row.queue] = QueueDepth(
                row.queue,
                by_priority,
                depth.delayed + int(row.delayed),
                depth.in_flight + int(row.in_flight),
                depth.dead_letters + int(row.dead),
                depth.alerts + int(row.alerts),
                round(max(depth.oldest_ready_s, age, 0.0), 3),
            )
        return [found[q] for q in sorted(found)]

    async def read_history(self, tenant: str, task: t.TaskState) -> list[dict[str, Any]]:
        """The task's decisions in order: type, position, time and data of each."""
        rows = await self._conn.execute(
            select(events.c.type, events.c.position, events.c.time_rfc3339, events.c.data)
            .where(events.c.tenant == tenant, events.c.stream == task.stream)
            .order_by(events.c.stream_version)
        )
        return [
            {"type": r.type, "position": r.position, "time": r.time_rfc3339, "data": r.data}
            for r in rows
        ]

    # -- commands --------------------------------------------------------------------

    async def dispatch(self, tenant: str, route: Route, record: ChainRecord) -> bool:
        """Make ``route``'s task for ``record`` (superseding a debounced one); False when
        that task exists already (the dispatcher is being replayed)."""
        task_id = t.task_id_for(tenant, route.id, record.id)
        # The log says whether the task was made, not its row: a finished task's row is
        # pruned after the retention period, and a replayed dispatcher must not make it again.
        made = {"tenant": tenant, "id": t.decision_id(task_id, 1)}
        if (await self._conn.execute(_CREATED, made)).first() is not None:
            return False
        now = datetime.now(UTC)
        trigger_time = event_time(record)
        key = route.debounce_value(record)
        window = timedelta(seconds=route.debounce_window_s)
        newer: t.TaskState | None = None
        if key is not None:
            pending = await self._conn.execute(
                select(tasks)
                .where(
                    _c.tenant == tenant,
                    _c.route_id == route.id,
                    func.md5(_c.debounce_key) == func.md5(key),  # what the index holds
                    _c.debounce_key == key,
                    _c.state == "ready",
                    _c.trigger_time > _shifted(trigger_time, -window),
                    _c.trigger_time < _shifted(trigger_time, window),
                )
                .order_by(_c.trigger_time, _c.seq)
                .with_for_update(skip_locked=True)
            )
            for row in pending.all():
                other = t.TaskState(*row)
                if other.trigger_time > trigger_time:
                    newer = other  # this event came late: the pending one is newer
                    continue
                await self._decide(
                    tenant,
                    other,
                    t.SUPERSEDED,
                    {"by": record.id, "by_task": task_id},
                    at=now,
                    causes=(record.id,),
                )
        trigger = {"id": record.id, "type": record.type, "source": record.source}
        event = t.created(
            tenant=tenant,
            task_id=task_id,
            route={**route.as_json(), "requires": route.requires.as_json()},
            priority=route.priority_for(record),
            trigger={**trigger, "time": trigger_time.isoformat()},
            debounce_key=key,
            at=now,
        )
        [appended] = await self._append(tenant, [event])
        state = t.fold(None, event.type, event.data, appended.position)
        await self._write(state)
        if newer is not None:
            # Arrived after a newer event with its key: made, and at once superseded by it.
            await self._decide(
                tenant,
                state,
                t.SUPERSEDED,
                {"by": newer.trigger_id, "by_task": newer.id},
                at=now,
                causes=(newer.trigger_id,),
            )
        return True

    async def lease(
        self,
        tenant: str,
        queue: str,
        profile: WorkerProfile,
        *,
        lease_s: float,
        off_peak: OffPeak | None,
    ) -> Lease | None:
        """The best ready task ``profile`` can run, leased to it; None when there is none."""
        now = datetime.now(UTC)
        lowest, highest = 0, 9
        if profile.spot:
            highest = GUARANTEED_ABOVE  # guaranteed work never goes to spot capacity
        elif off_peak is not None and off_peak.is_active(now):
            lowest = off_peak.max_priority + 1  # low-priority work waits for spot workers
        skip: list[str] = []
        parameters = {
            "tenant": tenant,
            "queue": queue,
            "now": now,
            "numbers": Jsonb(profile.numbers),
            "flags": sorted(profile.flags),
            "labels": Jsonb(profile.labels),
            "lowest": lowest,
            "highest": highest,
            "skip": skip,
        }
        # A row can lag the log (its process died after appending, or a rebuild runs):
        # its decision then conflicts on the task's stream, and the next task is tried.
        for _ in range(_LEASE_TRIES):
            row = await _LEASE_ON_DRIVER.first(self._conn, **parameters)
            if row is None:
                return None
            state = t.TaskState(*row)
            lease_id = uuid.uuid4().hex
            expires = now + timedelta(seconds=lease_s)
            decision = {
                "lease": lease_id,
                "worker": profile.worker,
                "attempt": state.attempts + 1,
                "expires_at": expires.isoformat(),
                "spot": profile.spot,
                "labels": profile.labels,
            }
            if state.service is not None:
                # What the service's deployment was when the task ran: a model mismatch
                # rolls back only that, never a later version someone else rolled to.
                deployment = await DeploymentReader(self._conn).fetch_state(tenant, state.service)
                decision["deployment_version"] = deployment.stream_version
            try:
                state = await self._decide(tenant, state, t.LEASED, decision, at=now)
            except (VersionConflict, IdConflict):
                skip.append(state.id)
                continue
            trigger = await EventReader(self._conn).read_event(tenant, state.trigger_id)
            return Lease(state, lease_id, expires, trigger or "null")
        return None

    async def extend(
        self,
        tenant: str,
        task_id: str,
        lease_id: str,
        *,
        lease_s: float | None,
        default_lease_s: float,
        max_lease_s: float,
    ) -> t.TaskState:
        """Extend the lease to ``lease_s`` from now (by default, as long as it was last
        granted for, else ``default_lease_s``), ``max_lease_s`` at most; never to end
        sooner than it does already, so a heartbeat cannot hand a running task back."""
        state = await self._held(tenant, task_id, lease_id)
        now = datetime.now(UTC)
        if lease_s is None:
            lease_s = await self._granted_s(tenant, state) or default_lease_s
        expires = now + timedelta(seconds=min(lease_s, max_lease_s))
        if state.lease_expires_at is not None:
            expires = max(expires, state.lease_expires_at)
        return await self._decide(
            tenant,
            state,
            t.LEASE_EXTENDED,
            {"lease": lease_id, "expires_at": expires.isoformat()},
            at=now,
        )

    async def complete(
        self, tenant: str, task_id: str, lease_id: str, results: Sequence[NewEvent]
    ) -> tuple[t.TaskState, list[int]]:
        """Append ``results`` (each caused by the trigger, besides its own causes) and the
        completion, atomically; the positions of the results.

        A retry of a completion that went through (the same lease: its answer was lost on
        the way back) gets the same answer and writes nothing, provided it sends the same
        results; other results under that lease are a ``Conflict``."""
        state = await self.fetch(tenant, task_id, lock=True)
        if state is not None and state.state == "completed":
            first = await self._completion(tenant, state)
            if first is not None and first.get("lease") == lease_id:
                return state, await self._complete_again(tenant, state, first, results)
        state = _holding(state, task_id, lease_id)
        caused = _caused_by_trigger(state, results)
        now = datetime.now(UTC)
        done = t.decision(
            state,
            t.COMPLETED,
            {"lease": lease_id, "worker": state.worker, "results": [e.id for e in caused]},
            at=now,
            causes=tuple(dict.fromkeys(e.id for e in caused)),  # a result sent twice is one
        )
        _, appended = await self._commit(tenant, state, [*caused, done])
        return state, [a.position for a in appended[:-1]]

    async def _completion(self, tenant: str, state: t.TaskState) -> dict[str, Any] | None:
        """The data of the decision that completed the task (its last one)."""
        row = (
            await self._conn.execute(
                select(events.c.type, events.c.data).where(
                    events.c.tenant == tenant, events.c.id == state.last_decision_id
                )
            )
        ).first()
        if row is None or row.type != t.COMPLETED or not isinstance(row.data, dict):
            return None
        return row.data

    async def _complete_again(
        self,
        tenant: str,
        state: t.TaskState,
        first: dict[str, Any],
        results: Sequence[NewEvent],
    ) -> list[int]:
        """The positions of the results of the completion ``first``, which ``results``
        repeat: the same ids in the same order, each with the content stored (the log
        answers a re-send with where it is, and refuses other content under its id)."""
        caused = _caused_by_trigger(state, results)
        stored = first.get("results")
        if [e.id for e in caused] != stored:
            named = ", ".join(repr(i) for i in stored or []) or "none"
            raise Conflict(
                f"task {state.id!r} was completed under this lease with other results "
                f"({named}); a retry must send the same results",
                task=state.id,
            )
        if not caused:
            return []
        appended = await self._append(tenant, caused)
        if not all(a.duplicate for a in appended):  # pragma: no cover - stored together
            raise RuntimeError(f"task {state.id!r}: a result of its completion was not stored")
        return [a.position for a in appended]

    async def fail(
        self, tenant: str, task_id: str, lease_id: str, error_class: str, message: str
    ) -> t.TaskState:
        state = await self._held(tenant, task_id, lease_id)
        return await self._after_failure(tenant, state, error_class, message)

    async def expire_leases(self, *, limit: int = 100) -> int:
        """Put tasks whose lease ran out back in the queue (or the dead-letter queue: the
        attempt counts). Safe to run in every process at once."""
        now = datetime.now(UTC)
        rows = (
            await self._conn.execute(
                select(tasks)
                .where(_c.state == "leased", _c.lease_expires_at < now)
                .order_by(_c.lease_expires_at)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
        ).all()
        for row in rows:
            state = t.TaskState(*row)
            await self._after_failure(
                state.tenant,
                state,
                "transient",
                f"lease expired: worker {state.worker!r} neither finished nor extended it",
                retry_now=True,
            )
        return len(rows)

    async def prune_finished(self, before: datetime, *, limit: int = 500) -> int:
        """Delete the rows of tasks that finished (completed, superseded, discarded) before
        ``before``, ``limit`` at most; their decisions stay in the log. Only rows the
        ``scheduler-tasks`` projection has passed go: it never meets a later event of
        theirs that would write one back. Safe to run in every process at once."""
        doomed = (
            select(_c.tenant, _c.id)
            .where(_FINISHED, _c.finished_at < before, _c.position <= _TASKS_CHECKPOINT)
            .limit(limit)
            .with_for_update(skip_locked=True)
            .cte("doomed")
        )
        gone = await self._conn.execute(
            delete(tasks).where(_c.tenant == doomed.c.tenant, _c.id == doomed.c.id)
        )
        return int(gone.rowcount)

    async def requeue(
        self, tenant: str, task_id: str, *, reason: str | None, actor: str
    ) -> t.TaskState:
        state = await self._dead(tenant, task_id)
        return await self._decide(
            tenant, state, t.REQUEUED, {"reason": reason, "actor": actor}, at=datetime.now(UTC)
        )

    async def discard(self, tenant: str, task_id: str, *, reason: str, actor: str) -> t.TaskState:
        state = await self._dead(tenant, task_id)
        return await self._decide(
            tenant, state, t.DISCARDED, {"reason": reason, "actor": actor}, at=datetime.now(UTC)
        )

    # -- internals -------------------------------------------------------------------

    async def _held(self, tenant: str, task_id: str, lease_id: str) -> t.TaskState:
        return _holding(await self.fetch(tenant, task_id, lock=True), task_id, lease_id)

    async def _dead(self, tenant: str, task_id: str) -> t.TaskState:
        state = await self.fetch(tenant, task_id, lock=True)
        if state is None:
            raise NotFound(f"no task {task_id!r}", task=task_id)
        if state.state != "dead":
            raise Conflict(f"task {task_id!r} is {state.state}, not dead-lettered", task=task_id)
        return state

    async def _after_failure(
        self,
        tenant: str,
        state: t.TaskState,
        error_class: str,
        message: str,
        *,
        retry_now: bool = False,
    ) -> t.TaskState:
        """Retry or dead-letter ``state`` after a failed attempt; a dead letter's handling
        (alert, rollback and requeue) is appended with it, in one atomic batch."""
        now = datetime.now(UTC)
        jitter = 0.0 if retry_now else t.draw_jitter()
        event_type, data = t.after_failure(state, error_class, message, at=now, jitter=jitter)
        if retry_now and event_type == t.RETRIED:
            data = {**data, "delay_s": 0.0, "retry_at": now.isoformat()}
        if event_type == t.DEAD_LETTERED and data["disposition"] == t.ARCHIVED:
            data = {**data, "input": await self._input_of(tenant, state.trigger_id)}
        batch = await self._failure_batch(tenant, state, event_type, data, error_class, message)
        try:
            return (await self._commit(tenant, state, batch))[0]
        except VersionConflict:
            if all(e.stream == state.stream for e in batch):
                raise
            # A concurrent rollback of the same service won: decide again on the
            # deployment as it is now (it changed since the task ran: a requeue only).
            batch = await self._failure_batch(tenant, state, event_type, data, error_class, message)
            return (await self._commit(tenant, state, batch))[0]

    async def _failure_batch(
        self,
        tenant: str,
        state: t.TaskState,
        event_type: str,
        data: dict[str, Any],
        error_class: str,
        message: str,
    ) -> list[NewEvent]:
        """The failure's decision and, for a dead letter, what its disposition brings."""
        now = datetime.now(UTC)
        dead_letter = t.decision_id(state.id, state.version + 1)
        follow: list[NewEvent] = []
        match data.get("disposition"):
            case t.FLAGGED:
                detail = {"class": error_class, "message": message, "attempts": state.attempts}
                follow = [t.alert(state, "dead_letter", detail, at=now, cause=dead_letter)]
            case t.ROLLBACK_PROPOSED:
                detail = {
                    "service": state.service,
                    "proposal": f"roll back the deployment of service {state.service!r}",
                    "message": message,
                }
                follow = [t.alert(state, "rollback_proposed", detail, at=now, cause=dead_letter)]
            case t.ROLLED_BACK | t.DEPLOYMENT_CHANGED | t.ROLLBACK_FAILED:
                disposition, follow = await self._roll_back(
                    tenant, state, dead_letter, message, now=now
                )
                data = {**data, "disposition": disposition}
        return [t.decision(state, event_type, data, at=now), *follow]

    async def _roll_back(
        self, tenant: str, state: t.TaskState, dead_letter: str, message: str, *, now: datetime
    ) -> tuple[str, list[NewEvent]]:
        """What follows the dead letter of a model mismatch, and the disposition it gets:
        the rollback of the route's service and the task's requeue behind it; only a
        requeue when the deployment changed since the task ran (someone, perhaps another
        failing task, rolled it already); an alert when there is nothing to roll back to."""
        service = state.service or ""  # set: the disposition is only chosen with a service
        deployment = await DeploymentReader(self._conn).fetch_state(tenant, service)
        dead = replace(state, version=state.version + 1)  # the state a requeue follows
        ran_on = await self._deployment_version_of(tenant, state)
        if ran_on is not None and ran_on != deployment.stream_version:
            reason = f"service {service!r} changed since the task ran; it runs again on that"
            requeue = t.decision(dead, t.REQUEUED, {"reason": reason, "actor": "scheduler"}, at=now)
            return t.DEPLOYMENT_CHANGED, [requeue]
        if await self._own_rollback(tenant, state) == deployment.stream_version:
            # It failed again on the deployment its own rollback left: rolling back once
            # more would walk the service back through every stable version it had.
            detail = {
                "class": "model_version_mismatch",
                "message": message,
                "attempts": state.attempts,
                "why": f"the task rolled service {service!r} back once already; "
                "it is not rolled back again",
            }
            return t.FLAGGED, [t.alert(state, "dead_letter", detail, at=now, cause=dead_letter)]
        try:
            rollback = deployment_commands.rollback(
                deployment,
                reason=f"task {state.id} failed with model_version_mismatch: {message}"[:500],
                actor="scheduler",
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

    async def _deployment_version_of(self, tenant: str, state: t.TaskState) -> int | None:
        """The version of the service's deployment stream when the task was last leased."""
        found = await self._conn.execute(
            select(events.c.data["deployment_version"].as_integer())
            .where(
                events.c.tenant == tenant,
                events.c.stream == state.stream,
                events.c.type == t.LEASED,
            )
            .order_by(events.c.stream_version.desc())
            .limit(1)
        )
        return found.scalar_one_or_none()

    async def _granted_s(self, tenant: str, state: t.TaskState) -> float | None:
        """How long the task's lease was last granted for: by its lease, or its last
        extension (each decision records when it was made and when the lease ends)."""
        found = (
            await self._conn.execute(
                select(events.c.data["at"].astext, events.c.data["expires_at"].astext)
                .where(
                    events.c.tenant == tenant,
                    events.c.stream == state.stream,
                    events.c.type.in_((t.LEASED, t.LEASE_EXTENDED)),
                )
                .order_by(events.c.stream_version.desc())
                .limit(1)
            )
        ).one_or_none()
        if found is None or None in found:
            return None
        granted = datetime.fromisoformat(found[1]) - datetime.fromisoformat(found[0])
        return granted.total_seconds() if granted.total_seconds() > 0 else None

    async def _own_rollback(self, tenant: str, state: t.TaskState) -> int | None:
        """The deployment version the task's last rollback left (the stream version of
        the rollback its dead letter caused), or None when it rolled nothing back."""
        dead = events.alias("dead")
        rollback = events.alias("rollback")
        found = await self._conn.execute(
            select(func.max(rollback.c.stream_version))
            .select_from(dead)
            .join(event_causes, event_causes.c.cause == dead.c.position)
            .join(rollback, rollback.c.position == event_causes.c.effect)
            .where(
                dead.c.tenant == tenant,
                dead.c.stream == state.stream,
                dead.c.type == t.DEAD_LETTERED,
                dead.c.data["disposition"].astext == t.ROLLED_BACK,
                rollback.c.type == deployment_commands.ROLLED_BACK,
            )
        )
        version = found.scalar_one()
        return None if version is None else int(version)

    async def _input_of(self, tenant: str, event_id: str) -> dict[str, Any] | None:
        """The trigger as a dead letter keeps it: its id, type, source, content type and
        data; binary data as ``data_base64``, as CloudEvents' JSON format writes it."""
        row = (
            await self._conn.execute(
                select(
                    events.c.type,
                    events.c.source,
                    events.c.datacontenttype,
                    events.c.data,
                    events.c.data_binary,
                ).where(events.c.tenant == tenant, events.c.id == event_id)
            )
        ).one_or_none()
        if row is None:
            return None
        found = {
            "id": event_id,
            "type": row.type,
            "source": row.source,
            "datacontenttype": row.datacontenttype,
        }
        if row.data_binary is not None:
            return {**found, "data_base64": base64.b64encode(row.data_binary).decode("ascii")}
        return {**found, "data": row.data}

    async def _decide(
        self,
        tenant: str,
        state: t.TaskState,
        event_type: str,
        data: dict[str, Any],
        *,
        at: datetime,
        causes: tuple[str, ...] = (),
    ) -> t.TaskState:
        event = t.decision(state, event_type, data, at=at, causes=causes)
        return (await self._commit(tenant, state, [event]))[0]

    async def _commit(
        self, tenant: str, state: t.TaskState, batch: list[NewEvent]
    ) -> tuple[t.TaskState, list[Appended]]:
        """Append ``batch`` atomically, then fold the task's own decisions in it into its
        row (still locked by this transaction); the task after, and where each event went."""
        appended = await self._append(tenant, batch)
        after = state
        for event, where in zip(batch, appended, strict=True):
            if event.stream == state.stream:
                after = t.fold(after, event.type, event.data, where.position)
        await self._write(after)
        return after, appended

    async def _write(self, state: t.TaskState) -> None:
        await write_task(self._conn, state)


def _holding(state: t.TaskState | None, task_id: str, lease_id: str) -> t.TaskState:
    """``state``, when the task is leased under ``lease_id`` and the lease has not run out."""
    if state is None:
        raise NotFound(f"no task {task_id!r}", task=task_id)
    expired = state.lease_expires_at is not None and state.lease_expires_at < datetime.now(UTC)
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


def _caused_by_trigger(state: t.TaskState, results: Sequence[NewEvent]) -> list[NewEvent]:
    """``results``, each caused by the task's trigger besides its own causes."""
    return [replace(e, causes=tuple(dict.fromkeys((*e.causes, state.trigger_id)))) for e in results]


def _upsert() -> Any:
    names = [c.name for c in tasks.columns]
    statement = insert(tasks).values({n: bindparam(n) for n in names})
    return statement.on_conflict_do_update(
        index_elements=["tenant", "id"],
        set_={n: statement.excluded[n] for n in names if n not in ("tenant", "id")},
        # Never back: a row written from a later decision stays (see TaskBook).
        where=tasks.c.position < statement.excluded.position,
    )


_UPSERT = DriverStatement.of(_upsert())  # built once: it is on every decision's path
_FIELDS = tuple(field.name for field in fields(t.TaskState))
if tuple(column.name for column in tasks.columns) != _FIELDS:  # pragma: no cover
    # Task rows (on the driver or through SQLAlchemy) are read into TaskState by position.
    raise RuntimeError("TaskState's fields must be the tasks table's columns, in order")


async def write_task(conn: AsyncConnection, state: t.TaskState) -> None:
    values = {name: getattr(state, name) for name in _FIELDS}
    values["req_numbers"] = Jsonb(state.req_numbers)
    values["req_labels"] = Jsonb(state.req_labels)
    await _UPSERT.run(conn, **values)


_EARLIEST = datetime.min.replace(tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)


def _shifted(at: datetime, by: timedelta) -> datetime:
    """``at + by``, held to the years datetime can hold: an event may be timed at
    0001-01-01 or 9999-12-31 (RFC 3339 allows either), and a window around it that
    overflowed stopped the dispatcher at that event for every tenant."""
    try:
        return at + by
    except OverflowError:
        return _EARLIEST if by < timedelta(0) else _LATEST
