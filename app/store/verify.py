"""Re-checks the hash chain from the first event, in bounded memory (``FETCH_BYTES``).

Every row must follow its predecessor (``position`` dense, ``prev_hash`` equal to the
previous ``hash``) and its ``hash`` must equal ``SHA-256(prev_hash || canonical(row))``.
The ``log_head`` row must name the last event. What the store keeps beside the hashed
content must follow from it: the ``time`` column (which filters read) is the hashed
``time`` text's instant, and the causal graph (``event_causes``, which walks read) holds
exactly one edge for each cause an event was hashed with. The first break is reported.

A chain rewritten from some event to the head, head included, checks out on its own. So
a verification can take anchors: hashes kept outside the database (a head an earlier
verification printed), each of which the chain must still carry at its position.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
from sqlalchemy import DateTime, Text, and_, case, cast, literal, or_, select, text
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ColumnElement

from app.db.engine import DriverStatement
from app.db.tables import events, log_head
from app.store.chain import GENESIS_HASH, seals
from app.store.log import full_row, record_from_row
from app.store.timestamps import parse_rfc3339

# The first effect whose edges in event_causes are not the causes it was hashed with: a
# named cause with no edge (or no such event in its tenant), or an edge its effect does
# not name. Set-based, in the walk's snapshot.
_EDGES_DIFFER = text("""
    SELECT min(position) FROM (
        SELECT effect.position
        FROM events AS effect
        CROSS JOIN LATERAL unnest(effect.causes) AS named (id)
        LEFT JOIN events AS cause ON cause.tenant = effect.tenant AND cause.id = named.id
        LEFT JOIN event_causes AS edge
               ON edge.effect = effect.position AND edge.cause = cause.position
        WHERE edge.effect IS NULL
      UNION ALL
        SELECT edge.effect
        FROM event_causes AS edge
        LEFT JOIN events AS effect ON effect.position = edge.effect
        LEFT JOIN events AS cause ON cause.position = edge.cause
        WHERE effect.position IS NULL OR cause.position IS NULL
           OR cause.tenant <> effect.tenant OR NOT cause.id = ANY (effect.causes)
    ) AS differ (position)
""")

_EDGES_REASON = "causal edges differ from the causes it was hashed with"

# Fetched at once: 64 MiB of event text at most (63 events of the 1 MiB the store takes
# by default). Their data loaded by the driver, 1,000 events of half a megabyte each held
# 14 times that as Python objects; as text, one event parsed at a time.
FETCH_BYTES = 64 << 20
ROW_BYTES = 512  # about what an event's attributes hold beside its data


@dataclass(frozen=True, slots=True)
class ChainReport:
    count: int
    head_hash: bytes
    bad_position: int | None = None
    reason: str | None = None

    @property
    def is_intact(self) -> bool:
        return self.bad_position is None and self.reason is None


async def verify_chain(
    conn: AsyncConnection,
    *,
    anchors: Mapping[int, bytes] | None = None,
    largest_event_bytes: int = 1 << 20,
    fetch_bytes: int = FETCH_BYTES,
) -> ChainReport:
    """Walk every event in position order; ``conn`` should be in a REPEATABLE READ
    transaction so the walk and the head check see one snapshot. ``anchors`` maps
    positions to the hash each must have. Memory: a fetch of events holds at most
    ``fetch_bytes`` of their data and extensions as JSON text when each holds at most
    ``largest_event_bytes`` (the store's ``CAUSEWAY_MAX_EVENT_DATA_BYTES``; 1,000 events
    at most), and the walk parses one event at a time."""
    anchors = anchors or {}
    expected_position, prev_hash, count = 1, GENESIS_HASH, 0
    # Read first, so that an effect whose edges differ is reported where the walk meets
    # it, not past a later break.
    differs = (await conn.execute(_EDGES_DIFFER)).scalar()
    per_fetch = max(1, min(1000, fetch_bytes // (largest_event_bytes + ROW_BYTES)))
    async with aclosing(_rows(conn, per_fetch)) as rows:
        async for row in rows:
            if row is None:  # a fetch held a value no event of the store's can hold
                reason = "content cannot be read, here or in the events fetched with it"
                return _broken(count, prev_hash, expected_position, reason)
            if row.position != expected_position:
                return _broken(count, prev_hash, expected_position, "position missing from the log")
            if not row.times_readable:
                reason = "a time past what the store writes"
                return _broken(count, prev_hash, row.position, reason)
            if bytes(row.prev_hash) != prev_hash:
                return _broken(count, prev_hash, row.position, "prev_hash does not match")
            record = record_from_row(row)
            try:
                record.data = _parsed(row.data)
                record.extensions = _parsed(row.extensions)
            except orjson.JSONDecodeError:  # numbers past what the store takes in
                reason = "data or extensions cannot be read as JSON"
                return _broken(count, prev_hash, row.position, reason)
            if not seals(bytes(row.hash), prev_hash, record):
                return _broken(count, prev_hash, row.position, "hash does not match the content")
            if anchors.get(row.position, row.hash) != bytes(row.hash):
                return _broken(count, prev_hash, row.position, "hash differs from the anchor")
            if not _time_follows(row.time, row.time_rfc3339):
                return _broken(count, prev_hash, row.position, "time differs from the hashed time")
            if row.position == differs:
                return _broken(count, prev_hash, row.position, _EDGES_REASON)
            prev_hash, count, expected_position = bytes(row.hash), count + 1, expected_position + 1
    if anchors and max(anchors) > count:
        return _broken(
            count, prev_hash, None, f"the log ends before the anchor at position {max(anchors)}"
        )
    head = (await conn.execute(select(log_head.c.position, log_head.c.hash))).one_or_none()
    if head is None:
        return _broken(count, prev_hash, None, "the log head row is missing")
    if head.position != count:
        reason = f"log head names position {head.position}, the log ends at {count}"
        return _broken(count, prev_hash, None, reason)
    if bytes(head.hash) != prev_hash:
        return _broken(count, prev_hash, None, "log head's hash differs from the last event's")
    if differs is not None:  # an edge of an effect past the log's end
        return _broken(count, prev_hash, differs, _EDGES_REASON)
    return ChainReport(count=count, head_hash=prev_hash)


async def _rows(conn: AsyncConnection, per_fetch: int) -> AsyncGenerator[Any]:
    """Every event in position order, its data and extensions as JSON text (parsed one
    event at a time by the walk), from a named cursor in ``conn``'s transaction,
    ``per_fetch`` at a time. A last None when a fetch had a value psycopg cannot load."""
    async with _ALL_EVENTS.cursor(conn) as cursor:
        while True:
            try:
                rows = await cursor.fetchmany(per_fetch)
            except psycopg.DataError:
                yield None
                return
            if not rows:
                return
            for row in rows:
                yield row


def _parsed(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)


# Python's datetime holds years 1 to 9999; PostgreSQL's timestamps reach further (and to
# +-infinity), which psycopg refuses to load. The store never writes such a time, so one
# is a forgery: it is read as NULL, and ``times_readable`` says so. (Sessions are in UTC.)
_LOADABLE = (
    literal(datetime(1, 1, 1, tzinfo=UTC), DateTime(timezone=True)),
    literal(datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), DateTime(timezone=True)),
)


def _loadable(column: ColumnElement[datetime]) -> ColumnElement[bool]:
    return column.between(*_LOADABLE)


def _column(column: ColumnElement[Any]) -> ColumnElement[Any]:
    if column.name in ("data", "extensions"):  # their text, parsed an event at a time
        return cast(column, Text).label(column.name)
    if column.name in ("time", "recorded_at"):
        return case((_loadable(column), column)).label(column.name)
    return column


# ``full_row()`` in position order.
_ALL_EVENTS = DriverStatement.of(
    select(
        *[_column(c) for c in events.c],
        *full_row()[1:],
        and_(
            _loadable(events.c.recorded_at),
            or_(events.c.time.is_(None), _loadable(events.c.time)),
        ).label("times_readable"),
    ).order_by(events.c.position)
)


async def read_head(conn: AsyncConnection) -> tuple[int, bytes] | None:
    """The log's head as the log records it: the last position (0 for an empty log) and
    its hash (``GENESIS_HASH`` then). What an anchor keeps. None when the row is gone (the
    migration makes it; only a hand in the database removes it): that is no empty log."""
    head = (await conn.execute(select(log_head.c.position, log_head.c.hash))).one_or_none()
    return None if head is None else (int(head.position), bytes(head.hash))


def _time_follows(stored: datetime | None, hashed: str | None) -> bool:
    """Whether the ``time`` column is the instant of the hashed ``time`` text. (A text
    that today's parser refuses, stored before it was as strict, proves nothing.)"""
    if hashed is None:
        return stored is None
    instant, _ = parse_rfc3339(hashed)
    return instant is None or stored == instant


def _broken(count: int, head: bytes, position: int | None, reason: str) -> ChainReport:
    return ChainReport(count=count, head_hash=head, bad_position=position, reason=reason)
