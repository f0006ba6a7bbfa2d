"""The ``tasks`` table: every statement that reads, locks, writes or deletes a task row.

A row is what ``scheduler.tasks.fold`` made of the task's decisions so far, read back into
``TaskState`` by position (the table's columns are TaskState's fields, in order). A row is
never written back to an older decision: the upsert compares positions. Locks are taken
in the caller's transaction; the queue's scans take rows with ``SKIP LOCKED`` and never
wait for one. The hot statements run on the driver (``DriverStatement``): a task takes a
dozen of them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from psycopg.types.json import Jsonb
from sqlalchemy import (
    and_,
    any_,
    bindparam,
    delete,
    func,
    literal_column,
    or_,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSON, JSONB, insert
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.types import Text

from app.db.engine import DriverStatement
from app.db.tables import events, tasks
from app.store import trace_contexts
from app.store.reads import structured_json
from app.telemetry.tracing import TraceContext
from scheduler.tasks import FIELDS, TASKS_PROJECTION, TaskState

TABLES = (tasks,)  # what TaskBook projects to; a rebuild empties it
_c = tasks.c
# A task fits a worker when each numeric requirement is at most the worker's capability of
# that name (0 when it reports none: a requirement of 0 asks for nothing), its flags are
# among the worker's true flags, and its labels among the worker's labels (see
# scheduler.placement). "Asks for nothing" is tested first, as an equality the planner
# estimates from the column's statistics: PostgreSQL guesses the rest (``text[] <@`` at
# 0.5% of rows when no task has a flag, NOT EXISTS at half), and once the table is
# analyzed, a queue of tasks without requirements looked like a few rows, so the lease
# scan read every ready task and sorted them instead of walking ix_tasks_ready to the
# first it takes (up to 900 ms a lease at 100,000 tasks in bench/scheduler.py;
# tests/integration/scheduler/test_lease_scan.py).
_FITS = text(
    "(tasks.req_numbers = '{}'::jsonb OR NOT EXISTS ("
    "SELECT 1 FROM jsonb_each_text(tasks.req_numbers) AS need "
    "WHERE coalesce((CAST(:numbers AS jsonb) ->> need.key)::float8, 0) < need.value::float8))"
).bindparams(bindparam("numbers", type_=JSONB))
_READY = (
    select(tasks)
    .where(
        _c.tenant == bindparam("tenant"),
        _c.queue == bindparam("queue"),
        # Written out, not a parameter: a generic plan can use ix_tasks_ready's predicate.
        _c.state == literal_column("'ready'"),
        _c.available_at <= bindparam("now"),
        _FITS,
        or_(
            _c.req_flags == literal_column("'{}'::text[]"),
            _c.req_flags.op("<@")(bindparam("flags", type_=ARRAY(Text))),
        ),
        _c.req_labels.op("<@")(bindparam("labels", type_=JSONB)),
        _c.priority.between(bindparam("lowest"), bindparam("highest")),
        ~(
            _c.id == any_(bindparam("skip", type_=ARRAY(Text)))
        ),  # not = ANY: an empty list skips none
    )
    .order_by(_c.priority.desc(), _c.seq)
    .with_for_update(skip_locked=True)
)
# The limit is written out too: a generic plan then reads the index in order. One statement
# per limit a lease has asked for (1 to 100), each compiled once.
_NEXT_READY: dict[int, DriverStatement] = {}
_FETCH = select(tasks).where(_c.tenant == bindparam("tenant"), _c.id == bindparam("id"))
_FETCH_ON_DRIVER = DriverStatement.of(_FETCH)
_FETCH_LOCKED_ON_DRIVER = DriverStatement.of(_FETCH.with_for_update())
# Many rows, locked in id order (the sort runs below the lock): two batches never deadlock;
# with the stored trace context of each task's trigger (its results continue the trigger's
# trace: ``scheduler.traces``), in the same statement. A batch completion runs it.
_LOCKED_WITH_TRACES = (
    select(tasks, trace_contexts.TRACEPARENT, trace_contexts.TRACESTATE)
    .select_from(
        tasks.outerjoin(
            events,
            and_(
                events.c.tenant == _c.tenant,
                events.c.id == _c.trigger_id,
                trace_contexts.TRACEPARENT.is_not(None),
            ),
        )
    )
    .where(_c.tenant == bindparam("tenant"))
    .order_by(_c.id)
    .with_for_update(of=tasks)
)
_WANTED = _c.id == any_(bindparam("ids", type_=ARRAY(Text)))
_FETCH_MANY_LOCKED = DriverStatement.of(_LOCKED_WITH_TRACES.where(_WANTED))
# The tasks a lease request leased and its worker still holds (written out as
# ix_tasks_lease_request's predicate, so that a generic plan uses the index).
_HELD = and_(
    _c.lease_request == bindparam("request"),
    _c.state == literal_column("'leased'"),
    _c.lease_request.is_not(None),
    _c.queue == bindparam("queue"),
    _c.worker == bindparam("worker"),
    _c.lease_expires_at > bindparam("now"),
)
# The same, and in the same statement the tasks a lease request (sent again) leased and
# its worker still holds (``fetch_held_by_request``): a lease request that completes
# tasks and names itself costs no round trip more.
_FETCH_MANY_LOCKED_OR_HELD = DriverStatement.of(_LOCKED_WITH_TRACES.where(or_(_WANTED, _HELD)))
_FETCH_POSITION = DriverStatement.of(
    select(_c.position).where(_c.tenant == bindparam("tenant"), _c.id == bindparam("id"))
)
# Many tasks' positions: the pairs (tenant, id) as two arrays of the same length.
_FETCH_POSITIONS = DriverStatement.of(
    text(
        "SELECT t.tenant, t.id, t.position FROM tasks t"
        " JOIN unnest(CAST(:tenants AS text[]), CAST(:ids AS text[])) AS k (tenant, id)"
        " ON t.tenant = k.tenant AND t.id = k.id"
    )
)
# Many tasks' rows locked in (tenant, id) order, the order the commands lock theirs in
# (the sort runs below the lock): the task book, catching rows up, never waits for a row
# while it holds one a command will ask for next.
_LOCK_KEYS = DriverStatement.of(
    text(
        "SELECT t.id FROM tasks t"
        " JOIN unnest(CAST(:tenants AS text[]), CAST(:ids AS text[])) AS k (tenant, id)"
        " ON t.tenant = k.tenant AND t.id = k.id"
        " ORDER BY t.tenant, t.id FOR UPDATE OF t"
    )
)
_HELD_BY_REQUEST = DriverStatement.of(
    select(tasks)
    .where(_c.tenant == bindparam("tenant"), _HELD)
    .order_by(_c.priority.desc(), _c.seq)
)
# Written out as ix_tasks_finished's predicate, so that every plan (a generic one too) can
# use the index: a bound array would match it only once planned for its values.
_FINISHED = text("tasks.state IN ('completed', 'superseded', 'discarded')")


def _upsert(statement: Any) -> Any:
    """``statement`` (an insert into tasks) writing over a row unless it holds a later
    decision."""
    return statement.on_conflict_do_update(
        index_elements=["tenant", "id"],
        set_={n: statement.excluded[n] for n in FIELDS if n not in ("tenant", "id")},
        # Never back: a row written from a later decision stays (see TaskBook).
        where=tasks.c.position < statement.excluded.position,
    )


if tuple(column.name for column in tasks.columns) != FIELDS:  # pragma: no cover
    # Task rows (on the driver or through SQLAlchemy) are read into TaskState by position.
    raise RuntimeError("TaskState's fields must be the tasks table's columns, in order")
# Built once: they are on every decision's path.
_UPSERT = DriverStatement.of(_upsert(insert(tasks).values({n: bindparam(n) for n in FIELDS})))
# Many rows in one statement: one JSON array, which PostgreSQL reads into the table's row
# type (timestamps in RFC 3339; arrays and objects as JSON become text[] and jsonb). A batch
# of ten leases or completions costs half the client CPU of a pipelined executemany of
# ``_UPSERT`` (250 us against 490, measured on this service's rows).
_MANY = func.json_populate_recordset(
    literal_column("NULL::tasks"), bindparam("rows", type_=JSON)
).table_valued(*FIELDS)
_WRITE_MANY = _upsert(insert(tasks).from_select(FIELDS, select(*[_MANY.c[n] for n in FIELDS])))
_UPSERT_MANY = DriverStatement.of(_WRITE_MANY)

# The upsert above, and a read of events in the same statement (the CTE runs though the
# select names it not): a lease writes its rows and reads its triggers in one round trip.
_WRITE_READING = DriverStatement.of(
    select(events.c.id, structured_json())
    .where(
        events.c.tenant == bindparam("tenant"),
        events.c.id == any_(bindparam("event_ids", type_=ARRAY(Text))),
    )
    .add_cte(_WRITE_MANY.cte("written"))
)


# The decisions a task row lacks, as a condition on ``events`` (the task book's reads,
# ``TaskBook.reads_only``): a decision names its task in its data, and a row written from
# it or a later one holds it. Usually none: the command that decided wrote the row.
LACKED = ~(
    select(literal_column("1"))
    .where(
        _c.tenant == events.c.tenant,
        _c.id == events.c.data["task_id"].astext,
        _c.position >= events.c.position,
    )
    .exists()
)


@dataclass(frozen=True, slots=True)
class Fit:
    """What a worker offers, as the lease scan matches it: its numeric capabilities, true
    flags and labels, and the band of priorities it may take."""

    numbers: dict[str, float]
    flags: list[str]
    labels: dict[str, str]
    lowest: int
    highest: int


async def fetch_task(
    conn: AsyncConnection, tenant: str, task_id: str, *, lock: bool = False
) -> TaskState | None:
    statement = _FETCH_LOCKED_ON_DRIVER if lock else _FETCH_ON_DRIVER
    row = await statement.first(conn, tenant=tenant, id=task_id)
    if row is None and lock:
        # A rebuild of the tasks read model deletes every row and inserts it again in
        # one transaction: a lock that waited for it finds the old row deleted, and
        # only a statement begun after the rebuild committed sees the new one.
        row = await statement.first(conn, tenant=tenant, id=task_id)
    return TaskState(*row) if row is not None else None


async def fetch_tasks_locked(
    conn: AsyncConnection, tenant: str, task_ids: list[str]
) -> tuple[dict[str, TaskState | None], dict[str, TraceContext]]:
    """The rows of ``task_ids``, locked in id order (None: no such row, read again alone,
    as ``fetch_task`` does, in case a rebuild replaced it); and the stored trace contexts
    of their triggers, by trigger id (a trigger with none is left out). One statement."""
    rows = await _FETCH_MANY_LOCKED.rows(conn, tenant=tenant, ids=task_ids)
    return await _locked(conn, tenant, task_ids, rows)


async def fetch_tasks_locked_or_held(
    conn: AsyncConnection,
    tenant: str,
    task_ids: list[str],
    held_by: HeldBy,
) -> tuple[dict[str, TaskState | None], dict[str, TraceContext], list[TaskState]]:
    """``fetch_tasks_locked``, and in the same statement what ``fetch_held_by_request``
    finds for ``held_by`` (locked too), best first."""
    rows = await _FETCH_MANY_LOCKED_OR_HELD.rows_once_locked(
        conn, _request_lock(tenant, held_by.queue, held_by.worker, held_by.request),
        tenant=tenant, ids=task_ids, request=held_by.request, queue=held_by.queue,
        worker=held_by.worker, now=held_by.now,
    )  # fmt: skip
    wanted = set(task_ids)
    width = len(FIELDS)
    held = [TaskState(*row[:width]) for row in rows if row[1] not in wanted]
    held.sort(key=lambda s: (-s.priority, s.seq))
    found, traces = await _locked(conn, tenant, task_ids, [r for r in rows if r[1] in wanted])
    return found, traces, held


@dataclass(frozen=True, slots=True)
class HeldBy:
    """A lease request sent again: its name, queue and worker, and the time now."""

    request: str
    queue: str
    worker: str
    now: datetime


async def _locked(
    conn: AsyncConnection, tenant: str, task_ids: list[str], rows: Sequence[Sequence[Any]]
) -> tuple[dict[str, TaskState | None], dict[str, TraceContext]]:
    """The rows of ``task_ids`` from ``rows`` (each a task's columns, then its trigger's
    trace context), by id, and the trace contexts by trigger id."""
    width = len(FIELDS)
    found: dict[str, TaskState | None] = {}
    traces: dict[str, TraceContext] = {}
    for row in rows:
        state = TaskState(*row[:width])
        found[state.id] = state
        if row[width] is not None:
            traces[state.trigger_id] = (row[width], row[width + 1])
    for task_id in task_ids:
        if task_id not in found:
            again = found[task_id] = await fetch_task(conn, tenant, task_id, lock=True)
            if again is not None:
                traces.update(await trace_contexts.trace_contexts(conn, tenant, [again.trigger_id]))
    return {task_id: found[task_id] for task_id in task_ids}, traces


async def fetch_position(conn: AsyncConnection, tenant: str, task_id: str) -> int | None:
    """The position of the last decision written to the task's row."""
    row = await _FETCH_POSITION.first(conn, tenant=tenant, id=task_id)
    return None if row is None else int(row[0])


async def fetch_positions(
    conn: AsyncConnection, keys: Collection[tuple[str, str]]
) -> dict[tuple[str, str], int]:
    """The positions of the last decisions written to the rows of ``keys`` (tenant, task
    id), in one statement; a key with no row is left out."""
    if not keys:
        return {}
    tenants, ids = zip(*keys, strict=True)
    rows = await _FETCH_POSITIONS.rows(conn, tenants=list(tenants), ids=list(ids))
    return {(row[0], row[1]): int(row[2]) for row in rows}


async def lock_tasks(conn: AsyncConnection, keys: Collection[tuple[str, str]]) -> None:
    """Lock the rows of ``keys`` (tenant, task id) in (tenant, id) order, in one statement,
    until the transaction ends; a key with no row is passed."""
    if keys:
        tenants, ids = zip(*keys, strict=True)
        await _LOCK_KEYS.rows(conn, tenants=list(tenants), ids=list(ids))


async def fetch_next_ready(
    conn: AsyncConnection,
    tenant: str,
    queue: str,
    fit: Fit,
    *,
    now: datetime,
    skip: list[str],
    limit: int = 1,
) -> list[TaskState]:
    """The best ``limit`` ready tasks of ``queue`` that ``fit`` takes, locked, in
    priority-then-age order (``ix_tasks_ready``); rows another transaction holds, and
    ``skip``, are passed."""
    statement = _NEXT_READY.get(limit)
    if statement is None:
        statement = DriverStatement.of(_READY.limit(literal_column(str(int(limit)))))
        _NEXT_READY[limit] = statement
    found = await statement.rows(conn, tenant=tenant, **_fit_parameters(queue, fit, now, skip))
    return [TaskState(*row) for row in found]


def _fit_parameters(queue: str, fit: Fit, now: datetime, skip: list[str]) -> dict[str, Any]:
    """The parameters of the ready scan (``_READY``) but its tenant."""
    return {
        "queue": queue,
        "now": now,
        "numbers": Jsonb(fit.numbers),
        "flags": fit.flags,
        "labels": Jsonb(fit.labels),
        "lowest": fit.lowest,
        "highest": fit.highest,
        "skip": skip,
    }


async def fetch_held_by_request(
    conn: AsyncConnection, tenant: str, queue: str, worker: str, request: str, *, now: datetime
) -> list[TaskState]:
    """The tasks of ``queue`` that lease request ``request`` of ``worker`` leased and that
    are still leased under it, unexpired at ``now``, best first (as the lease scan orders
    them); each with its lease id and end (``ix_tasks_lease_request``). Read once no
    other try of the same request is under way (``_request_lock``)."""
    found = await _HELD_BY_REQUEST.rows_once_locked(
        conn, _request_lock(tenant, queue, worker, request),
        tenant=tenant, queue=queue, worker=worker, request=request, now=now,
    )  # fmt: skip
    return [TaskState(*row) for row in found]


# The advisory locks of lease requests that name themselves (their namespace: "LEAS").
_LEASE_REQUESTS = 0x4C454153


def _request_lock(tenant: str, queue: str, worker: str, request: str) -> tuple[int, str]:
    """The lock a try of lease request ``request`` holds until its transaction ends: a
    worker whose client gave up sends the request again while the first try may still
    be at work, and the second try, waiting for the first, finds the tasks it leased
    (otherwise it leased others, and the first's, answered to no one, waited out their
    leases and lost an attempt)."""
    return _LEASE_REQUESTS, "\x1f".join((tenant, queue, worker, request))


# The tasks a lease request leased whose rows lack that lease (``scheduler.lagging``):
# among the leases the task book has not read yet (a row lacks only those), the last
# 10,000 at most (by ix_events_tenant_type_position, whose order the ORDER BY names whole:
# ordered by position alone, the planner walked events_pkey backwards past every other
# event since the checkpoint, 60-480 ms a request with the book 300,000 events behind),
# so a stopped book costs a bounded read; a request is sent again within seconds.
_LEASED_UNWRITTEN = DriverStatement.of(
    text(
        "SELECT DISTINCT e.data ->> 'task_id' FROM ("
        " SELECT e.tenant, e.position, e.data FROM events e"
        " WHERE e.tenant = :tenant AND e.type = 'causeway.task.leased' AND e.position > coalesce("
        "  (SELECT c.position FROM projection_checkpoints c WHERE c.name = :book), 0)"
        " ORDER BY e.tenant DESC, e.type DESC, e.position DESC LIMIT 10000) AS e"
        " WHERE e.data ->> 'request' = :request AND e.data ->> 'worker' = :worker"
        " AND e.data ->> 'queue' = :queue AND NOT EXISTS ("
        "  SELECT 1 FROM tasks t WHERE t.tenant = e.tenant"
        "  AND t.id = e.data ->> 'task_id' AND t.position >= e.position)"
    )
)


async def fetch_leased_unwritten(conn: AsyncConnection, tenant: str, held_by: HeldBy) -> set[str]:
    """The tasks lease request ``held_by`` leased (in the log) whose rows lack that lease:
    its first try appended the leases and failed before it wrote them."""
    found = await _LEASED_UNWRITTEN.rows(
        conn, tenant=tenant, book=TASKS_PROJECTION, request=held_by.request,
        worker=held_by.worker, queue=held_by.queue,
    )  # fmt: skip
    return {row[0] for row in found}


async def fetch_expired_leases(
    conn: AsyncConnection, *, now: datetime, limit: int
) -> list[TaskState]:
    """Leased tasks whose lease ended before ``now``, soonest first, locked (rows held
    elsewhere are passed)."""
    rows = await conn.execute(
        select(tasks)
        .where(_c.state == "leased", _c.lease_expires_at < now)
        .order_by(_c.lease_expires_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return [TaskState(*row) for row in rows.all()]


async def write_task(conn: AsyncConnection, state: TaskState) -> None:
    await _UPSERT.run(conn, **_values(state))


async def write_tasks(conn: AsyncConnection, states: list[TaskState]) -> None:
    """Write every row of ``states`` in one statement (``_UPSERT_MANY``): each task once,
    as a statement can write a row only once."""
    if len(states) == 1:
        await write_task(conn, states[0])
    elif states:
        await _UPSERT_MANY.run(conn, rows=_json_rows(states))


async def write_tasks_reading(
    conn: AsyncConnection, states: list[TaskState], tenant: str, event_ids: list[str]
) -> dict[str, str]:
    """Write every row of ``states`` as ``write_tasks`` does and read the events of
    ``event_ids`` (the leased tasks' triggers) as ``EventReader.read_events`` reads them,
    by id, in one statement."""
    found = await _WRITE_READING.rows(
        conn, rows=_json_rows(states), tenant=tenant, event_ids=event_ids
    )
    return {row[0]: row[1] for row in found}


def _json_rows(states: list[TaskState]) -> str:
    """``states`` as the JSON array ``_MANY`` reads into rows of ``tasks``."""
    return orjson.dumps([{name: getattr(s, name) for name in FIELDS} for s in states]).decode()


def _values(state: TaskState) -> dict[str, Any]:
    values = {name: getattr(state, name) for name in FIELDS}
    values["req_numbers"] = Jsonb(state.req_numbers)
    values["req_labels"] = Jsonb(state.req_labels)
    return values


async def delete_finished(
    conn: AsyncConnection, *, before: datetime, up_to_position: int, limit: int
) -> int:
    """Delete the rows of tasks that finished (completed, superseded, discarded) before
    ``before`` whose last decision is at ``up_to_position`` or earlier, ``limit`` at most
    (rows held elsewhere are passed); how many went."""
    doomed = (
        select(_c.tenant, _c.id)
        .where(_FINISHED, _c.finished_at < before, _c.position <= up_to_position)
        .limit(limit)
        .with_for_update(skip_locked=True)
        .cte("doomed")
    )
    gone = await conn.execute(
        delete(tasks).where(_c.tenant == doomed.c.tenant, _c.id == doomed.c.id)
    )
    return int(gone.rowcount)
