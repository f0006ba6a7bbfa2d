"""Making tasks: the dispatcher's command, one ``causeway.task.created`` per route and
trigger event.

A task's id follows from its tenant, route and trigger (``tasks.task_id_for``), and the
log, not the task table, says whether it was made (a finished task's row is pruned after
the retention period), so a replayed dispatcher never makes a task twice. A route that
debounces supersedes the pending task with the same key inside its window
(``TaskQueue.supersede``); tasks no debouncing touches are made many at a time, with one
read, one append and one write of their rows. Decisions are appended in the caller's
transaction (the dispatcher's batch) and rows written as they are (``scheduler.rows``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from app.db.engine import Connection
from app.store import decision_reads as log
from app.store.log import EventLog, hold_head
from scheduler import debouncing
from scheduler import decisions as d
from scheduler import tasks as t
from scheduler.queue import TaskQueue
from scheduler.routes import Route, event_time
from scheduler.rows import debounced
from scheduler.rows import tasks as rows

if TYPE_CHECKING:
    from app.store.chain import ChainRecord
    from app.store.records import NewEvent


class TaskMaker:
    """Make the tasks routes give events, in ``conn``'s transaction."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._log = EventLog(conn)
        self._queue = TaskQueue(conn)

    async def make(self, tenant: str, route: Route, record: ChainRecord) -> bool:
        """Make ``route``'s task for ``record`` (superseding a debounced one); False when
        that task exists already (the dispatcher is being replayed)."""
        task_id = t.task_id_for(tenant, route.id, record.id)
        if await log.has_event(self._conn, tenant, t.decision_id(task_id, 1)):
            return False
        now = datetime.now(UTC)
        trigger_time = event_time(record)
        key = route.debounce_value(record)
        newer: t.TaskState | None = None
        if key is not None:
            # The head first, held to the commit: a command putting an older task of the
            # key back in the queue (a failed attempt's retry, a requeue) appends either
            # before this looks, and is found in the log below, or after this commits, and
            # finds this task itself (``TaskQueue.unless_newer``).
            await hold_head(self._conn)
            after, before = d.debounce_window(trigger_time, route.debounce_window_s)
            pending = await debounced.fetch_debounced(
                self._conn, tenant, route.id, route.debounce_key, key, after=after, before=before
            )
            for row in pending:
                # Its row may lag the log (superseded there in a race, below, and the
                # task book not by yet): decided on as the log has it.
                other = await self._caught_up(tenant, row)
                if other.state != "ready":
                    continue
                if other.trigger_time > trigger_time:
                    newer = other  # this event came late: the pending one is newer
                    continue
                await self._queue.supersede(tenant, other, by=record.id, by_task=task_id, at=now)
            await self._supersede_in_flight(
                tenant, route, key, (after, before), record, task_id, [p.id for p in pending]
            )
        event = _created(tenant, task_id, route, record, debounce_key=key, at=now)
        [appended] = await self._log.append(tenant, [event])
        state = t.fold(None, event.type, event.data, appended.position)
        await rows.write_task(self._conn, state)
        if newer is not None:
            # Arrived after a newer event with its key: made, and at once superseded by it.
            await self._queue.supersede(
                tenant, state, by=newer.trigger_id, by_task=newer.id, at=now
            )
        return True

    async def _caught_up(self, tenant: str, row: t.TaskState) -> t.TaskState:
        """The task of ``row`` (locked by this transaction) as the log has it, its row
        written so when it lagged."""
        logged = await debouncing.as_logged(self._conn, tenant, row)
        if logged.position != row.position:
            await rows.write_task(self._conn, logged)
        return logged

    async def _supersede_in_flight(
        self,
        tenant: str,
        route: Route,
        key: str,
        window: tuple[datetime, datetime],
        record: ChainRecord,
        task_id: str,
        passed: list[str],
    ) -> None:
        """Supersede, in the log, the older tasks of ``key`` a command has just put back in
        the queue (its decision appended, its row locked and not yet written): their rows
        catch up with the log (``TaskBook``), and a lease of one meanwhile conflicts on its
        stream and passes it."""
        trigger_time = event_time(record)
        unsettled = await debounced.fetch_unsettled(
            self._conn, tenant, route.id, route.debounce_key, key,
            after=window[0], before=window[1], passed=passed,
        )  # fmt: skip
        for other in unsettled:
            logged = await debouncing.as_logged(self._conn, tenant, other)
            if logged.state == "ready" and logged.trigger_time <= trigger_time:
                at = datetime.now(UTC)
                decided = debouncing.superseded(logged, by=record.id, by_task=task_id, at=at)
                await self._log.append(tenant, [decided])

    async def make_many(self, tenant: str, routed: Sequence[tuple[Route, ChainRecord]]) -> int:
        """Make the tasks of many (route, event) pairs whose routes do not debounce them, in
        their order: one read of which the log has already (a replayed dispatcher), one
        append, one write of the rows. How many were made."""
        made: list[tuple[str, Route, ChainRecord]] = []
        for route, record in routed:
            if route.debounce_value(record) is not None:
                raise ValueError(f"route {route.id!r} debounces {record.id!r}: use make")
            made.append((t.task_id_for(tenant, route.id, record.id), route, record))
        known = await log.existing_ids(
            self._conn, tenant, [t.decision_id(task_id, 1) for task_id, _, _ in made]
        )
        now = datetime.now(UTC)
        fresh = [
            _created(tenant, task_id, route, record, debounce_key=None, at=now)
            for task_id, route, record in made
            if t.decision_id(task_id, 1) not in known
        ]
        if not fresh:
            return 0
        appended = await self._log.append(tenant, fresh)
        await rows.write_tasks(
            self._conn,
            [
                t.fold(None, e.type, e.data, a.position)
                for e, a in zip(fresh, appended, strict=True)
            ],
        )
        return len(fresh)


def _created(
    tenant: str,
    task_id: str,
    route: Route,
    record: ChainRecord,
    *,
    debounce_key: str | None,
    at: datetime,
) -> NewEvent:
    """The decision that makes ``route``'s task for ``record``."""
    trigger = {"id": record.id, "type": record.type, "source": record.source}
    return t.created(
        tenant=tenant,
        task_id=task_id,
        route={**route.as_json(), "requires": route.requires.as_json()},
        priority=route.priority_for(record),
        trigger={**trigger, "time": event_time(record).isoformat()},
        debounce_key=debounce_key,
        debounce_on=route.debounce_key,
        at=at,
    )
