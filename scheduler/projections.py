"""The scheduler's projections of the log.

- ``Dispatcher`` reads route events, and every event of the tenants that have routes
  (``Selective``). Route events maintain the routing table; any other event is matched
  against the routes of its tenant as they stood at its position, and each matching
  route makes its task (``causeway.task.created``, caused by the event),
  supersedes a debounced one, or counts towards a pre-warm request. It appends those
  decisions in the runner's transaction, with the checkpoint, so an event is dispatched
  exactly once across crashes and restarts; on a rebuild it finds its tasks already made
  and appends nothing again. Tasks that no debouncing touches are kept until the batch
  ends (or until a decision that must see them: a debounced task, a pre-warm count, a
  route change) and made together: one read, one append and one write for all of them.
- ``TaskBook`` is the task table. The commands that decide write it as they append (see
  ``scheduler.queue``); as a projection it follows the log behind them, so a row whose
  write was lost to a crash catches up, and a rebuild from the log alone gives the same
  rows. It checks a batch's decisions against their rows in one statement.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

from app.db.engine import Connection
from app.errors import AppError
from app.projections.base import FlushFailed, Selection
from app.store.decision_reads import has_event
from app.store.log import EventLog
from app.store.records import NewEvent
from scheduler import routes as r
from scheduler import tasks as t
from scheduler.creation import TaskMaker
from scheduler.rows import routes as route_rows
from scheduler.rows import tasks as task_rows

if TYPE_CHECKING:
    from app.store.chain import ChainRecord
    from app.store.records import StoredEvent

PREWARM_REQUESTED = "causeway.model.prewarm_requested"
# The dispatcher's batch (runners take this as its size). Its plain tasks are appended at
# the batch's end, so it holds the log head only from then to the commit; a debounced or
# pre-warm decision appends at once and holds it for the rest of the batch.
DISPATCH_BATCH = 500
# The task book checks its kept decisions at least this often (a rebuild reads the whole log
# in one transaction).
TASK_BOOK_FLUSH = 1000
logger = logging.getLogger(__name__)
_NAMESPACE = uuid.UUID("0f3a52f4-8f87-4bc1-9a55-1d8a7d4b6c21")


class Dispatcher:
    name = "scheduler-dispatch"
    tables = route_rows.TABLES
    types = None
    # The scheduler's decisions come from its own source (t.SOURCE, r.SOURCE), which
    # ``selection`` passes: an append of a lease or of a completion without results has
    # nothing for it, and woke it for a transaction of its own each time (with one worker
    # leasing and completing one task at a time, 8% of the server's CPU).
    quiet_types = t.TYPES

    def __init__(self) -> None:
        # Routes by tenant, loaded from the routes table as a batch needs them. They hold
        # for one transaction only: a batch retried after a rollback, a rebuild, or one
        # after another process led must not trust them, so a new connection drops them.
        self._routes: dict[str, list[r.Route]] = {}
        self._batch: Connection | None = None
        # Plain tasks to make at the batch's end, by tenant, in the order of their events.
        self._pending: dict[str, list[tuple[r.Route, ChainRecord]]] = {}
        self._kept = 0

    async def selection(self, conn: Connection) -> Selection:
        """The events of tenants with routes, and route events: no other event can
        make a task, so a store without routes costs the dispatcher next to nothing. The
        scheduler's own decisions never route (``Route.matches``): not read at all."""
        tenants = await route_rows.read_routed_tenants(conn)
        return Selection(tuple(tenants), tuple(sorted(r.TYPES)), (r.SOURCE,))

    async def apply(self, conn: Connection, event: StoredEvent) -> None:
        record = event.record
        if conn is not self._batch:
            self._routes.clear()
            self._pending.clear()  # a batch that failed: its transaction is gone
            self._kept = 0
            self._batch = conn
        if record.type in r.TYPES:
            await self.flush(conn)
            await self._apply_route(conn, record)
            return
        for route in await self._routes_of(conn, record.tenant):
            if not route.matches(record):
                continue
            if route.makes_tasks:
                if route.debounce_value(record) is None:
                    self._pending.setdefault(record.tenant, []).append((route, record))
                    self._kept += 1
                else:
                    await self.flush(conn)
                    await TaskMaker(conn).make(record.tenant, route, record)
            if route.prewarm is not None:
                await self.flush(conn)
                await _count_towards_prewarm(conn, route, record)
        if self._kept >= DISPATCH_BATCH:
            await self.flush(conn)  # a rebuild reads the whole log in one transaction

    async def flush(self, conn: Connection) -> None:
        """Make the plain tasks kept so far (the runner calls this at the batch's end)."""
        pending, self._pending, self._kept = self._pending, {}, 0
        for tenant, routed in pending.items():
            maker = TaskMaker(conn)
            try:
                await maker.make_many(tenant, routed)
            except AppError:
                # Refused before anything was written: make them one by one to find the
                # event that fails, so the projection stops at it. Should none fail (the
                # group refused as a whole), they are made: raising again would roll them
                # back and the batch would fail the same way for ever.
                for route, record in routed:
                    try:
                        await maker.make(tenant, route, record)
                    except AppError as refused:
                        raise FlushFailed(record.position) from refused

    async def _routes_of(self, conn: Connection, tenant: str) -> list[r.Route]:
        if tenant not in self._routes:
            specs = await route_rows.read_specs(conn, tenant)
            self._routes[tenant] = [
                route for spec in specs if (route := _stored_route(spec)) is not None
            ]
        return self._routes[tenant]

    async def _apply_route(self, conn: Connection, record: ChainRecord) -> None:
        self._routes.pop(record.tenant, None)
        route_id = record.data["id"]
        # A definition that changes what pre-warm counts (its types, predicates or rule)
        # starts its counts afresh: the events an earlier one matched count nothing
        # towards it. The same definition applied again (a deploy that applies every
        # route) keeps them. Decided from the stored row at this position: a rebuild alike.
        before = await route_rows.read_spec(conn, record.tenant, route_id)
        if before is not None and (record.type == r.DELETED or _counts_otherwise(before, record)):
            await route_rows.delete_prewarm_windows(conn, record.tenant, route_id)
        if record.type == r.DELETED:
            await route_rows.delete_route(conn, record.tenant, route_id)
            return
        await route_rows.write_route(
            conn, record.tenant, route_id, record.data, position=record.position
        )


def _counts_otherwise(before: dict[str, Any], record: ChainRecord) -> bool:
    """Whether the route's new definition counts other events towards a pre-warm."""
    data = record.data if isinstance(record.data, dict) else {}
    return any(before.get(k) != data.get(k) for k in ("types", "type", "where", "prewarm"))


def _stored_route(spec: dict[str, object]) -> r.Route | None:
    """A stored route; None (and an error logged) for one today's rules refuse, so one
    bad definition stops only itself, never routing for everyone."""
    try:
        return r.route_from_json(dict(spec))
    except AppError as refused:
        logger.error("route %r is skipped: %s", spec.get("id"), refused.detail)
        return None


async def _count_towards_prewarm(conn: Connection, route: r.Route, record: ChainRecord) -> None:
    """Count the event in its source's window; once ``count`` events lie within
    ``within_s`` of each other (by event time), ask for the model to be pre-warmed,
    caused by exactly those events, which then count no more."""
    rule = route.prewarm
    if rule is None:
        return
    key = route_rows.PrewarmKey(record.tenant, route.id, record.source)
    window = await route_rows.fetch_prewarm_window(conn, key)
    at_us = _micros(r.event_time(record))
    causes, kept = _prewarm_step(window, [record.id, at_us], rule.count, rule.within_s * 1e6)
    if causes:
        await _request_prewarm(conn, route, record, causes)
    await route_rows.write_prewarm_window(conn, key, kept)


def _prewarm_step(
    window: list[list[Any]], entry: list[Any], count: int, within_us: float
) -> tuple[list[str], list[list[Any]]]:
    """The ids of the ``count`` events (``entry`` among them) that lie within ``within_us``
    of each other, in log order ([] for none), and the window to keep: ``[id, µs]``
    pairs in log order.

    A late event is matched on both sides of its time, so it never counts with events
    far newer than it. Any such set would include ``entry``: the kept window holds none
    without it. It exists when ``count`` consecutive events by time around ``entry`` span
    less than ``within_us``; the earliest is taken, so a rebuild takes the same. The
    window keeps only events later than the newest one's time less ``within_us``, as
    before (a late event older than that is matched, never kept): fewer than ``count``
    events, all within ``within_us`` of each other."""
    pairs = [*window, entry]
    by_time = sorted(range(len(pairs)), key=lambda n: int(pairs[n][1]))  # stable: log order
    at = by_time.index(len(pairs) - 1)
    chosen: set[int] = set()
    for first in range(max(0, at - count + 1), min(at, len(pairs) - count) + 1):
        run = by_time[first : first + count]
        if int(pairs[run[-1]][1]) - int(pairs[run[0]][1]) < within_us:
            chosen = set(run)
            break
    newest = int(pairs[by_time[-1]][1])
    kept = [
        pair
        for n, pair in enumerate(pairs)
        if n not in chosen and int(pair[1]) > newest - within_us
    ]
    return [str(pairs[n][0]) for n in sorted(chosen)], kept


async def _request_prewarm(
    conn: Connection, route: r.Route, record: ChainRecord, causes: list[str]
) -> None:
    rule = route.prewarm
    if rule is None:
        return
    event_id = (
        f"causeway:prewarm:{uuid.uuid5(_NAMESPACE, f'{record.tenant}/{route.id}/{record.id}').hex}"
    )
    if await has_event(conn, record.tenant, event_id):
        return  # requested before this rebuild
    at = r.event_time(record)
    await EventLog(conn).append(
        record.tenant,
        [
            NewEvent(
                id=event_id,
                source=r.SOURCE,
                type=PREWARM_REQUESTED,
                stream=f"causeway:prewarm:{route.id}",
                time=at.isoformat(),
                time_value=at,
                has_data=True,
                data={
                    "model": rule.model,
                    "route": route.id,
                    "source": record.source,
                    "count": len(causes),
                    "within_s": rule.within_s,
                },
                causes=tuple(causes),
            )
        ],
    )


class TaskBook:
    name = t.TASKS_PROJECTION
    tables = task_rows.TABLES
    types = t.TYPES
    # Only the decisions a row lacks: under lease + complete, reading every one back
    # (to find its row had it) cost the server 13-23 us of CPU a decision.
    reads_only = task_rows.LACKED

    def __init__(self) -> None:
        self._batch: Connection | None = None
        self._pending: list[ChainRecord] = []

    async def apply(self, conn: Connection, event: StoredEvent) -> None:
        """Keep the decision: the batch's are checked against their rows together."""
        if conn is not self._batch:
            self._pending.clear()  # a batch that failed: its transaction is gone
            self._batch = conn
        self._pending.append(event.record)
        if len(self._pending) >= TASK_BOOK_FLUSH:
            await self.flush(conn)  # a rebuild's batches are long

    async def flush(self, conn: Connection) -> None:
        """Read the rows' positions of the kept decisions in one statement and fold those
        a row lacks: usually none, the command that decided wrote the row already."""
        pending, self._pending = self._pending, []
        keys = {(record.tenant, record.data["task_id"]) for record in pending}
        written = await task_rows.fetch_positions(conn, keys)
        lacking = [
            record
            for record in pending
            if (at := written.get((record.tenant, record.data["task_id"]))) is None
            or at < record.position
        ]
        # Their rows locked first, all at once in task id order, as the commands lock
        # theirs: folded one by one in log order, the book held a row (written, or found
        # written by the command that decided) while it waited for the next, which a
        # batch failure held while it waited for the first (deadlock detected: a 503).
        await task_rows.lock_tasks(conn, {(r.tenant, r.data["task_id"]) for r in lacking})
        for record in lacking:
            try:
                await _fold_into_row(conn, record)
            except Exception as exc:
                raise FlushFailed(record.position) from exc


async def _fold_into_row(conn: Connection, record: ChainRecord) -> None:
    """Fold one decision into its task's row, unless the row has it already (read again:
    an earlier decision of this batch, or a command, may have written it since)."""
    data = record.data
    written = await task_rows.fetch_position(conn, record.tenant, data["task_id"])
    if written is not None and written >= record.position:
        return
    state = None
    if record.type != t.CREATED:
        state = await task_rows.fetch_task(conn, record.tenant, data["task_id"])
    await task_rows.write_task(conn, t.fold(state, record.type, data, record.position))


def scheduler_projections() -> list[Dispatcher | TaskBook]:
    return [Dispatcher(), TaskBook()]


def _micros(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000)
