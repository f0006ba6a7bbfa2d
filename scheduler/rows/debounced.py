"""The task rows of one debounce key: what the dispatcher supersedes when a newer event of
the key comes (``scheduler.creation``), and the newer task a failed attempt is superseded
by (``scheduler.debouncing``). Both find a key by its digest first, which
``ix_tasks_debounce_key`` holds (a key is event content of any length, a btree entry is
not), then by the key itself."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import and_, func, literal, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ColumnElement

from app.db.tables import events, tasks
from scheduler.tasks import STREAM_PREFIX, TaskState

_c = tasks.c
_DROPPED = ("discarded", "superseded")  # states of a task whose input no longer stands


def _in_window(
    tenant: str, route_id: str, attribute: str | None, key: str, after: datetime, before: datetime
) -> tuple[ColumnElement[bool], ...]:
    """The route's tasks with debounce key ``key`` triggered strictly between ``after``
    and ``before``."""
    return (
        *_keyed(tenant, route_id, attribute, key),
        _c.trigger_time > after,
        _c.trigger_time < before,
    )


def _keyed(
    tenant: str, route_id: str, attribute: str | None, key: str
) -> tuple[ColumnElement[bool], ...]:
    """The route's tasks with debounce key ``key``, the value of ``attribute``: a task made
    under a definition of the route that debounced on another attribute is not one of
    them; one made before tasks named it (migration 0019) is matched on the value alone."""
    return (
        _c.tenant == tenant,
        _c.route_id == route_id,
        func.md5(_c.debounce_key) == func.md5(key),  # what the index holds
        _c.debounce_key == key,
        or_(_c.debounce_on == attribute, _c.debounce_on.is_(None)),
    )


async def fetch_debounced(
    conn: AsyncConnection,
    tenant: str,
    route_id: str,
    attribute: str | None,
    key: str,
    *,
    after: datetime,
    before: datetime,
) -> list[TaskState]:
    """The route's ready tasks with debounce key ``key`` (the value of ``attribute``)
    triggered strictly between ``after`` and ``before``, oldest first, locked (rows held
    elsewhere are passed)."""
    rows = await conn.execute(
        select(tasks)
        .where(*_in_window(tenant, route_id, attribute, key, after, before), _c.state == "ready")
        .order_by(_c.trigger_time, _c.seq)
        .with_for_update(skip_locked=True)
    )
    return [TaskState(*row) for row in rows.all()]


async def fetch_unsettled(
    conn: AsyncConnection,
    tenant: str,
    route_id: str,
    attribute: str | None,
    key: str,
    *,
    after: datetime,
    before: datetime,
    passed: list[str],
) -> list[TaskState]:
    """The route's tasks with debounce key ``key`` triggered strictly between ``after``
    and ``before`` that a command may be putting back in the queue now: ready, leased or
    dead by their rows, other than ``passed`` (those the caller locked): the ready ones
    (another transaction holds them), and the others whose rows lag their streams (a
    decision appended, its row not yet written); not locked."""
    stream = literal(STREAM_PREFIX).concat(_c.id)
    lagging = (
        select(literal(1))
        .where(events.c.tenant == _c.tenant, events.c.stream == stream)
        .where(events.c.position > _c.position)
        .exists()
    )
    rows = await conn.execute(
        select(tasks).where(
            *_in_window(tenant, route_id, attribute, key, after, before),
            _c.state.in_(("ready", "leased", "dead")),
            _c.id.not_in(passed),
            # Ready and not ``passed``: locked by another (a lease under way, which the
            # supersede in the log makes conflict); leased or dead: put back if it lags.
            or_(_c.state == "ready", lagging),
        )
    )
    return [TaskState(*row) for row in rows.all()]


async def fetch_newer_debounced(
    conn: AsyncConnection,
    tenant: str,
    route_id: str,
    attribute: str,
    key: str,
    *,
    after: TaskState,
    before: datetime,
) -> TaskState | None:
    """The route's newest task with debounce key ``key`` (the value of ``attribute``)
    triggered after ``after`` (later, or at the same time and made after it: as the
    dispatcher takes an event of the same time as newer) and before ``before`` whose input
    still stands: waiting, running, done or dead, not discarded by an operator (its input
    was dropped) nor superseded (a newer one stands for it); None when none."""
    newer = or_(
        _c.trigger_time > after.trigger_time,
        and_(_c.trigger_time == after.trigger_time, _c.seq > after.seq),
    )
    row = (
        await conn.execute(
            select(tasks)
            .where(
                *_keyed(tenant, route_id, attribute, key),
                newer,
                _c.trigger_time < before,
                _c.state.not_in(_DROPPED),
            )
            .order_by(_c.trigger_time.desc(), _c.seq.desc())
            .limit(1)
        )
    ).first()
    return TaskState(*row) if row is not None else None
