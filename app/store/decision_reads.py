"""Reads of the log for the decisions Causeway records about its own work (the scheduler's
task and route streams): a stream's entries, the last of some types, one event by id (or
which of many ids it holds), what a stream's events caused, the mean time some of them
came after the entries before them, and how far a projection has read.

Every read is within one tenant and in the caller's connection. Entries come back with
their ``data`` as stored, never narrowed by a JSON path of the query's own: what a
decision means is the caller's to say (``scheduler.decisions``), not the query's.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, Text, and_, any_, bindparam, cast, func, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import event_causes, events, projection_checkpoints

_e = events.c
_HAS_EVENT = select(_e.position).where(_e.tenant == bindparam("tenant"), _e.id == bindparam("id"))


@dataclass(frozen=True, slots=True)
class LoggedEntry:
    """One event of a stream: its type, position, RFC 3339 time and JSON data."""

    type: str
    position: int
    time: str
    data: Any


@dataclass(frozen=True, slots=True)
class EventContent:
    """What a consumer of an event reads: its type, source, content type and data (JSON
    in ``data``, or bytes in ``data_binary``)."""

    type: str
    source: str
    datacontenttype: str | None
    data: Any
    data_binary: bytes | None


@dataclass(frozen=True, slots=True)
class CausedEffect:
    """An event of a stream (its data) and the stream version of an event it caused."""

    cause_data: Any
    effect_stream_version: int


async def has_event(conn: AsyncConnection, tenant: str, event_id: str) -> bool:
    return (await conn.execute(_HAS_EVENT, {"tenant": tenant, "id": event_id})).first() is not None


async def existing_ids(conn: AsyncConnection, tenant: str, ids: Collection[str]) -> set[str]:
    """Which of ``ids`` the tenant's log holds, in one statement."""
    if not ids:
        return set()
    found = await conn.execute(select(_e.id).where(_e.tenant == tenant, _e.id.in_(list(ids))))
    return set(found.scalars())


async def read_stream(conn: AsyncConnection, tenant: str, stream: str) -> list[LoggedEntry]:
    """The stream's events in order."""
    rows = await conn.execute(
        select(_e.type, _e.position, _e.time_rfc3339, _e.data)
        .where(_e.tenant == tenant, _e.stream == stream)
        .order_by(_e.stream_version)
    )
    return [LoggedEntry(r.type, r.position, r.time_rfc3339, r.data) for r in rows]


async def read_last(
    conn: AsyncConnection,
    tenant: str,
    stream: str,
    *,
    types: Collection[str] | None = None,
    having: str | None = None,
) -> LoggedEntry | None:
    """The stream's last event (of ``types``, and whose data has the member ``having``,
    when given); None when it has none."""
    statement = select(_e.type, _e.position, _e.time_rfc3339, _e.data).where(
        _e.tenant == tenant, _e.stream == stream
    )
    if types is not None:
        statement = statement.where(_e.type.in_(tuple(types)))
    if having is not None:
        statement = statement.where(_e.data.has_key(having))
    row = (await conn.execute(statement.order_by(_e.stream_version.desc()).limit(1))).one_or_none()
    return None if row is None else LoggedEntry(row.type, row.position, row.time_rfc3339, row.data)


async def mean_wait_s(
    conn: AsyncConnection,
    tenant: str,
    streams: Collection[str],
    *,
    entry_type: str,
    since: datetime,
    ready_from: Sequence[str],
) -> float | None:
    """The mean time from the entry before each ``entry_type`` event of ``streams`` timed
    after ``since`` to that event, in seconds; None when there is none. The caller says
    which member of the entry before holds the time it counts from (the first of
    ``ready_from`` that it has: RFC 3339 text), as what a decision means is its to say.
    One statement, with ``streams`` as one array parameter, however many (a parameter each
    would pass the protocol's 65,535 and compile anew for every count); each event's
    predecessor by the unique (tenant, stream, version) index."""
    if not streams:
        return None
    entry, before = events.alias("entry"), events.alias("before")
    counted = func.coalesce(*(before.c.data[key].astext for key in ready_from))
    wait = func.extract("epoch", entry.c.time - cast(counted, DateTime(timezone=True)))
    statement = (
        select(func.avg(wait))
        .select_from(entry)
        .join(
            before,
            and_(
                before.c.tenant == entry.c.tenant,
                before.c.stream == entry.c.stream,
                before.c.stream_version == entry.c.stream_version - 1,
            ),
        )
        .where(
            entry.c.tenant == tenant,
            entry.c.stream == any_(bindparam("streams", list(streams), type_=ARRAY(Text))),
            entry.c.type == entry_type,
            entry.c.time > since,
        )
    )
    waited = (await conn.execute(statement)).scalar()
    return None if waited is None else float(waited)


async def read_entry(conn: AsyncConnection, tenant: str, event_id: str) -> LoggedEntry | None:
    """The event with id ``event_id``, as a stream entry."""
    row = (
        await conn.execute(
            select(_e.type, _e.position, _e.time_rfc3339, _e.data).where(
                _e.tenant == tenant, _e.id == event_id
            )
        )
    ).first()
    return None if row is None else LoggedEntry(row.type, row.position, row.time_rfc3339, row.data)


async def read_content(conn: AsyncConnection, tenant: str, event_id: str) -> EventContent | None:
    row = (
        await conn.execute(
            select(_e.type, _e.source, _e.datacontenttype, _e.data, _e.data_binary).where(
                _e.tenant == tenant, _e.id == event_id
            )
        )
    ).one_or_none()
    if row is None:
        return None
    return EventContent(row.type, row.source, row.datacontenttype, row.data, row.data_binary)


async def read_effects(
    conn: AsyncConnection, tenant: str, stream: str, *, cause_type: str, effect_type: str
) -> list[CausedEffect]:
    """Each event of type ``effect_type`` that an event of ``stream`` of type
    ``cause_type`` caused, with that cause's data."""
    cause = events.alias("cause")
    effect = events.alias("effect")
    rows = await conn.execute(
        select(cause.c.data, effect.c.stream_version)
        .select_from(cause)
        .join(event_causes, event_causes.c.cause == cause.c.position)
        .join(effect, effect.c.position == event_causes.c.effect)
        .where(
            cause.c.tenant == tenant,
            cause.c.stream == stream,
            cause.c.type == cause_type,
            effect.c.type == effect_type,
        )
    )
    return [CausedEffect(r.data, int(r.stream_version)) for r in rows]


async def read_checkpoint(conn: AsyncConnection, projection: str) -> int | None:
    """The position the projection named ``projection`` has applied the log up to."""
    found = await conn.execute(
        select(projection_checkpoints.c.position).where(projection_checkpoints.c.name == projection)
    )
    position = found.scalar_one_or_none()
    return None if position is None else int(position)
