"""The task queue's commands: every change to a task after its creation (``creation``).

A command runs in the caller's transaction: it locks the task's row (``scheduler.rows.tasks``),
reads what else it needs from the log (``app.store``), asks ``scheduler.decisions`` what
follows, appends that decision, and writes the row it folds to (``tasks.fold``). The HTTP
commands and the sweeper append through the group-commit ``Appender`` (concurrent commands
share its transaction and fsync, each holding its row lock until it wrote the row); the
dispatcher appends in its own transaction. A row is never written back to an older
decision (the upsert compares positions), and ``TaskBook`` follows the log too, so if a
process dies between an append and its row write, the row catches up; a lease that
meets such a row meanwhile gets a version conflict on the task's stream, never a second
lease, and a failure or completion refused on it is decided on the log (``lagging``).

Locks are taken in one order, task rows before the log head, so commands never deadlock;
the dispatcher (holding the log head to supersede a pending task) takes task rows with
``SKIP LOCKED``. Leasing walks ``ix_tasks_ready`` by priority, then age, ``FOR UPDATE SKIP
LOCKED``: concurrent leasers each take different rows, and none waits for another."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from app.db.engine import Connection
from app.errors import AppError, IdConflict, VersionConflict
from app.store import decision_reads as log
from app.store.deployment_reads import DeploymentReader
from app.store.log import EventLog
from app.store.reads import EventReader
from scheduler import dead_lettering, debouncing, lagging
from scheduler import decisions as d
from scheduler import tasks as t
from scheduler.completing import Completed, Completing, Item, sorted_ids
from scheduler.lease_requests import Lease, Wanted, fetch_held, fit_of
from scheduler.rows import tasks as rows
from scheduler.rows import wakeups
from scheduler.traces import completion_spans, end_all

if TYPE_CHECKING:
    from app.store.append.group_commit import Appender
    from app.store.records import Appended, NewEvent

_LEASE_TRIES = 5


class TaskQueue:
    """Commands over the queue on ``conn`` (the caller's transaction). Decisions are
    appended by ``appender`` when given (group commit: concurrent commands share one append
    transaction, each keeping its row locked in its own), else in ``conn``'s transaction
    (the dispatcher, the sweeper)."""

    def __init__(self, conn: Connection, *, appender: Appender | None = None) -> None:
        self._conn = conn
        self._append = appender.append if appender is not None else EventLog(conn).append

    async def lease(self, tenant: str, wanted: Wanted) -> list[Lease]:
        """Up to ``wanted.max_tasks`` of the best ready tasks its worker can run, each
        leased to it under a lease of its own, their decisions appended as one group; none
        when there is none. A request sent again gets what it leased (``Wanted.request``)."""
        if wanted.request is not None and (held := await self._held_by(tenant, wanted)):
            return wanted.holding(held)
        now = datetime.now(UTC)
        fit = fit_of(wanted.profile, wanted.off_peak, now)
        expires = now + timedelta(seconds=wanted.lease_s)
        skip: list[str] = []
        # A row can lag the log (its process died after appending, or a rebuild runs):
        # its decision then conflicts on the task's stream, and the next task is tried.
        for _ in range(_LEASE_TRIES):
            found = await rows.fetch_next_ready(
                self._conn, tenant, wanted.queue, fit, now=now, skip=skip, limit=wanted.max_tasks
            )
            if not found:
                return []
            granted, batch = await self._grants(tenant, found, wanted, now, expires)
            try:
                appended = await self._append(tenant, batch)
            except (VersionConflict, IdConflict):
                # One stale row spoils the group: lease these one at a time, passing it.
                leased = await self._lease_each(tenant, granted, batch, skip)
                if leased:
                    return await self._leases(tenant, leased, expires)
                continue
            after = [
                (t.fold(state, e.type, e.data, a.position), lease_id)
                for (state, lease_id), e, a in zip(granted, batch, appended, strict=True)
            ]
            return await self._leases(tenant, after, expires, writing=[s for s, _ in after])
        return []

    async def _grants(
        self,
        tenant: str,
        found: list[t.TaskState],
        wanted: Wanted,
        now: datetime,
        expires: datetime,
    ) -> tuple[list[tuple[t.TaskState, str]], list[NewEvent]]:
        """A lease of its own for each task of ``found``, for ``wanted``'s worker, and the
        decisions granting them."""
        granted: list[tuple[t.TaskState, str]] = []
        batch: list[NewEvent] = []
        versions: dict[str, int] = {}  # each service's deployment version, read once
        for state in found:
            lease_id = uuid.uuid4().hex
            version = None
            if state.service is not None:
                if state.service not in versions:
                    reader = DeploymentReader(self._conn)
                    versions[state.service] = await reader.fetch_version(tenant, state.service)
                version = versions[state.service]
            decision = d.lease_data(
                state,
                wanted.profile,
                lease_id,
                expires=expires,
                deployment_version=version,
                request=wanted.request,
            )
            granted.append((state, lease_id))
            batch.append(t.decision(state, t.LEASED, decision, at=now))
        return granted, batch

    async def _held_by(self, tenant: str, wanted: Wanted) -> list[Lease]:
        """The leases ``wanted.request`` made in its queue that its worker still holds
        (unexpired), with their triggers, best first; empty when none. Those its rows
        lack (written by a try that failed after its append) are found in the log."""
        return await self._leases_held(tenant, await fetch_held(self._conn, tenant, wanted))

    async def _leases_held(self, tenant: str, held: list[t.TaskState]) -> list[Lease]:
        """The leases of ``held`` (leased tasks), with their triggers."""
        ids = [state.trigger_id for state in held]
        triggers = await EventReader(self._conn).read_events(tenant, ids) if held else {}
        return [
            Lease(s, s.lease_id or "", s.lease_expires_at or datetime.now(UTC),
                  triggers.get(s.trigger_id, "null"))
            for s in held
        ]  # fmt: skip

    async def _lease_each(
        self,
        tenant: str,
        granted: list[tuple[t.TaskState, str]],
        batch: list[NewEvent],
        skip: list[str],
    ) -> list[tuple[t.TaskState, str]]:
        leased = []
        for (state, lease_id), event in zip(granted, batch, strict=True):
            try:
                leased.append(((await self._commit(tenant, state, [event]))[0], lease_id))
            except (VersionConflict, IdConflict):
                skip.append(state.id)
        return leased

    async def _leases(
        self,
        tenant: str,
        leased: list[tuple[t.TaskState, str]],
        expires: datetime,
        *,
        writing: list[t.TaskState] | None = None,
    ) -> list[Lease]:
        """The leases of ``leased``, each with its trigger event, read in one statement;
        in the same statement, the rows ``writing`` are written (``rows.write_tasks``)."""
        trigger_ids = [state.trigger_id for state, _ in leased]
        if writing:
            triggers = await rows.write_tasks_reading(self._conn, writing, tenant, trigger_ids)
        else:
            triggers = await EventReader(self._conn).read_events(tenant, trigger_ids)
        return [
            Lease(state, lease_id, expires, triggers.get(state.trigger_id, "null"))
            for state, lease_id in leased
        ]

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
        sooner than it does already, so a heartbeat cannot hand a running task back. Sent
        again after a 503 that came after its append, it is decided on the log (``lagging``)."""

        async def extended(found: t.TaskState | None) -> t.TaskState:
            now = datetime.now(UTC)
            state = d.holding(found, task_id, lease_id, now)
            granted = lease_s
            if granted is None:
                last_grant = await log.read_last(
                    self._conn, tenant, state.stream, types=(t.LEASED, t.LEASE_EXTENDED)
                )
                granted = d.granted_s(last_grant) or default_lease_s
            expires = d.extended_expiry(state, lease_s=granted, max_lease_s=max_lease_s, now=now)
            data = {"lease": lease_id, "expires_at": expires.isoformat()}
            return await self._decide(tenant, state, t.LEASE_EXTENDED, data, at=now)

        found = await rows.fetch_task(self._conn, tenant, task_id, lock=True)
        return await lagging.deciding(self._conn, tenant, found, extended)

    async def complete(
        self, tenant: str, task_id: str, lease_id: str, results: Sequence[NewEvent]
    ) -> tuple[t.TaskState, list[int]]:
        """Append ``results`` (each caused by the trigger, besides its own causes) and the
        completion, atomically; the positions of the results. A retry of a completion that
        went through (same lease: its answer was lost) gets the same answer and writes
        nothing, provided it sends the same results; others under that lease: ``Conflict``."""
        [outcome] = await self.complete_many(tenant, [(task_id, lease_id, results)])
        if isinstance(outcome, AppError):
            raise outcome
        return outcome

    async def complete_many(self, tenant: str, items: Sequence[Item]) -> list[Completed | AppError]:
        """Complete each ``(task, lease, results)`` of ``items`` as ``complete`` does, all
        in one append group; each answered on its own (a lease lost, a result refused,
        fails its task alone), in the order of ``items``."""
        batch = await Completing.start(self._conn, self._append, tenant, items)
        spans = completion_spans(tenant, [r.state for r in batch.ready], batch.traces)
        try:
            await batch.finish(self._conn, self._append, self._commit, tenant)
        finally:
            end_all(spans)
        return batch.answers()

    async def complete_and_lease(
        self, tenant: str, items: Sequence[Item], wanted: Wanted
    ) -> tuple[list[Lease], list[Completed | AppError]]:
        """Complete ``items`` as ``complete_many`` does, then lease what ``wanted`` asks
        for as ``lease`` does, at about the cost of one of them: one statement locks the
        completed tasks' rows, one scans for the next, the completions' decisions and the
        leases' are appended as one group, and every row they change is written in one
        statement. When the log refuses that group (a result under an id it holds
        with other content, a row that lags the log), each part is done as those two do
        it, so that a refusal fails its own task only."""
        if not items:
            return await self.lease(tenant, wanted), []
        # Two statements, not one: the lock may wait for another transaction, and a scan
        # in the same statement would then run on the snapshot taken before the wait. It
        # would lock, and keep locked to its end, the rows leased since (PostgreSQL locks
        # a row before it finds that the row's new version no longer matches): the
        # workers holding them then wait for this request to finish their completions.
        # The first also finds what a request sent again leased before (``Wanted.request``).
        ids = sorted_ids(items)
        if wanted.request is None:
            locked = await rows.fetch_tasks_locked(self._conn, tenant, ids)
        else:
            held_by = wanted.held_by(datetime.now(UTC))
            found_rows, traces, held = await rows.fetch_tasks_locked_or_held(
                self._conn, tenant, ids, held_by
            )
            locked = (found_rows, traces)
            held = held or await lagging.held_in_log(self._conn, tenant, held_by)
            if held:  # sent again: its completions answered as before, its leases given back
                return await self._leases_held(
                    tenant, wanted.holding(held)
                ), await self.complete_many(tenant, items)
        scanned_at = datetime.now(UTC)
        fit = fit_of(wanted.profile, wanted.off_peak, scanned_at)
        found = await rows.fetch_next_ready(
            self._conn, tenant, wanted.queue, fit, now=scanned_at, skip=[], limit=wanted.max_tasks
        )
        batch = await Completing.start(self._conn, self._append, tenant, items, locked)
        if not batch.ready:
            return await self.lease(tenant, wanted), batch.answers()
        spans = completion_spans(tenant, [r.state for r in batch.ready], batch.traces)
        try:
            if found:
                # Granted once the completions are decided (the statement may have waited
                # for their rows): the leases' time and end run from then, after theirs.
                now = datetime.now(UTC)
                expires = now + timedelta(seconds=wanted.lease_s)
                granted, leases = await self._grants(tenant, found, wanted, now, expires)
                done = batch.events()
                try:
                    appended = await self._append(tenant, [*done, *leases])
                except AppError:
                    pass  # each part on its own, below
                else:
                    finished = batch.settle(appended[: len(done)])
                    leased = [
                        (t.fold(state, e.type, e.data, a.position), lease_id)
                        for (state, lease_id), e, a in zip(
                            granted, leases, appended[len(done) :], strict=True
                        )
                    ]
                    writing = [*finished, *(s for s, _ in leased)]
                    found_leases = await self._leases(tenant, leased, expires, writing=writing)
                    return found_leases, batch.answers()
            await batch.finish(self._conn, self._append, self._commit, tenant)
        finally:
            end_all(spans)
        return (await self.lease(tenant, wanted) if found else []), batch.answers()

    async def fail(
        self, tenant: str, task_id: str, lease_id: str, error_class: str, message: str
    ) -> t.TaskState:
        """Retry or dead-letter the task leased under ``lease_id``; a report sent again
        (its answer lost) is answered with the task as it is now, while its last failure
        (a decision with a ``class``) is that report: the same lease, class and message.
        So is one sent again after a 503 that came after its decision was appended, its
        row lagging the log (``lagging``): refused on the row, it is decided on the log."""

        async def failed(row: t.TaskState | None) -> t.TaskState:
            return await self._fail(tenant, row, task_id, lease_id, error_class, message)

        row = await rows.fetch_task(self._conn, tenant, task_id, lock=True)
        return await lagging.deciding(self._conn, tenant, row, failed)

    async def _fail(
        self,
        tenant: str,
        state: t.TaskState | None,
        task_id: str,
        lease_id: str,
        error_class: str,
        message: str,
    ) -> t.TaskState:
        if state is not None and not (state.state == "leased" and state.lease_id == lease_id):
            ended = (t.RETRIED, t.DEAD_LETTERED, t.SUPERSEDED)
            last = await log.read_last(
                self._conn, tenant, state.stream, types=ended, having="class"
            )
            if d.is_failure_reported(last, lease_id, error_class, message):
                return state
        held = d.holding(state, task_id, lease_id, datetime.now(UTC))
        return await self._after_failure(tenant, held, error_class, message, lease_id=lease_id)

    async def fail_many(
        self, tenant: str, items: Sequence[tuple[str, str, str, str]]
    ) -> list[t.TaskState | AppError]:
        """Fail each ``(task, lease, class, message)`` of ``items`` as ``fail`` does, each
        answered on its own, in the order of ``items`` (rows locked by task id)."""
        outcomes: dict[int, t.TaskState | AppError] = {}
        for n in sorted(range(len(items)), key=lambda n: items[n][0]):
            task_id, lease_id, error_class, message = items[n]
            try:
                outcomes[n] = await self.fail(tenant, task_id, lease_id, error_class, message)
            except AppError as refused:
                outcomes[n] = refused
        return [outcomes[n] for n in range(len(items))]

    async def expire_leases(self, *, limit: int = 100) -> int:
        """Put tasks whose lease ran out back in the queue (or the dead-letter queue: the
        attempt counts). Safe to run in every process at once."""
        expired = await rows.fetch_expired_leases(self._conn, now=datetime.now(UTC), limit=limit)
        for state in expired:
            await self._after_failure(
                state.tenant,
                state,
                "transient",
                f"lease expired: worker {state.worker!r} neither finished nor extended it",
                retry_now=True,
            )
        return len(expired)

    async def requeue(
        self, tenant: str, task_id: str, *, reason: str | None, actor: str
    ) -> t.TaskState:
        """Put a dead letter back in its queue, its attempts reset; or, when a newer task
        of its debounce key came since, supersede it by that one (``debouncing.requeued``):
        its input is stale, and the newer is waiting, running or done."""
        state = await self._dead_letter(tenant, task_id)
        data = {"reason": reason, "actor": actor}
        event = await debouncing.requeued(self._conn, state, data, at=datetime.now(UTC))
        return await self.unless_newer(tenant, (await self._commit(tenant, state, [event]))[0])

    async def discard(self, tenant: str, task_id: str, *, reason: str, actor: str) -> t.TaskState:
        state, data = await self._dead_letter(tenant, task_id), {"reason": reason, "actor": actor}
        return await self._decide(tenant, state, t.DISCARDED, data, at=datetime.now(UTC))

    async def _dead_letter(self, tenant: str, task_id: str) -> t.TaskState:
        """The dead letter ``task_id``, its row locked; ``NotFound`` or ``Conflict`` else."""
        found = await rows.fetch_task(self._conn, tenant, task_id, lock=True)
        return d.dead_letter(found, task_id)

    async def _after_failure(
        self,
        tenant: str,
        state: t.TaskState,
        error_class: str,
        message: str,
        *,
        retry_now: bool = False,
        lease_id: str | None = None,
    ) -> t.TaskState:
        """Retry or dead-letter ``state`` after a failed attempt (reported under
        ``lease_id``, or the lease expired); a dead letter's handling is appended with it."""
        now = datetime.now(UTC)
        jitter = 0.0 if retry_now else t.draw_jitter()
        event_type, data = d.failure(
            state, error_class, message, at=now, jitter=jitter, retry_now=retry_now
        )
        if lease_id is not None:
            data = {**data, "lease": lease_id}
        if event_type == t.RETRIED and (newer := await debouncing.newer_task(self._conn, state)):
            failed = {"class": error_class, "message": message, "lease": lease_id}
            return await self.supersede(
                tenant, state, by=newer.trigger_id, by_task=newer.id, at=now, failed=failed
            )
        if event_type == t.DEAD_LETTERED and data["disposition"] == t.ARCHIVED:
            content = await log.read_content(self._conn, tenant, state.trigger_id)
            data = {**data, "input": d.archived_input(state.trigger_id, content)}
        batch = await dead_lettering.failure_batch(
            self._conn, tenant, state, event_type, data, error_class, message, now=now
        )
        try:
            after = (await self._commit(tenant, state, batch))[0]
        except VersionConflict:
            if all(e.stream == state.stream for e in batch):
                raise
            # A concurrent rollback of the same service won: decide again on the
            # deployment as it is now (it changed since the task ran: a requeue only).
            batch = await dead_lettering.failure_batch(
                self._conn, tenant, state, event_type, data, error_class, message, now=now
            )
            after = (await self._commit(tenant, state, batch))[0]
        return await self.unless_newer(tenant, after)

    async def unless_newer(self, tenant: str, state: t.TaskState) -> t.TaskState:
        """``state``, just put back in the queue (its decision appended, its row locked),
        superseded after all when a newer task of its debounce key came meanwhile: one the
        dispatcher made after this command looked for one, and committed before its
        append. (One made after the append finds the decision in the log, and supersedes
        it there: ``creation``.)"""
        if state.state != "ready" or state.debounce_key is None:
            return state
        newer = await debouncing.newer_task(self._conn, state)
        if newer is None:
            return state
        try:
            return await self.supersede(
                tenant, state, by=newer.trigger_id, by_task=newer.id, at=datetime.now(UTC)
            )
        except (VersionConflict, IdConflict):  # the dispatcher superseded it, in the log
            logged = await debouncing.as_logged(self._conn, tenant, state)
            await rows.write_task(self._conn, logged)  # its row is still ours: caught up
            return logged

    async def supersede(
        self,
        tenant: str,
        state: t.TaskState,
        *,
        by: str,
        by_task: str,
        at: datetime,
        failed: Mapping[str, object] | None = None,
    ) -> t.TaskState:
        """End a debounced task, pending or just ``failed`` (its report: ``debouncing``):
        the event ``by`` (whose task is ``by_task``) came with its key inside the window."""
        event = debouncing.superseded(state, by=by, by_task=by_task, at=at, data=failed)
        return (await self._commit(tenant, state, [event]))[0]

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
        await rows.write_task(self._conn, after)
        if after.state == "ready" and state.state != "ready":
            await wakeups.announce_ready(self._conn)  # the appender's hint may come first
        return after, appended
