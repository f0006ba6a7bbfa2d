"""The causal graph: events as values, their causes and effects in batches, keyset pages,
and bounded walks through the DAG. Everything is scoped to one tenant.

The walk runs in PostgreSQL as one function call (``causeway_walk``, defined in
``sql/causeway_walk.sql``, ``sql/causeway_walk_one.sql`` and ``sql/causeway_walk_from.sql``,
which ``walk_from`` calls itself for a walk from several events): a breadth-first
loop with one indexed query per level, inside the server, so a lineage 30 levels deep
costs one round trip instead of thirty. ``walk`` runs on a psycopg connection of its own
(``app.db.engine.DriverPool``); ``GraphReader``'s batches and pages on SQLAlchemy's.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson
from psycopg import AsyncConnection as PsycopgConnection
from sqlalchemy import BigInteger, Text, any_, cast, func, literal, null, select, true
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import event_causes, events
from app.store.chain import ChainRecord
from app.store.log import full_row, record_from_row
from app.store.reads import apply_filter
from app.store.records import EventFilter, StoredEvent


class Direction(enum.Enum):
    UPSTREAM = "upstream"  # towards causes
    DOWNSTREAM = "downstream"  # towards effects
    BOTH = "both"


@dataclass(frozen=True, slots=True)
class Page:
    events: list[StoredEvent]
    has_next: bool
    # Whether a match lies before the page's cursor (read only where asked: effects).
    has_previous: bool = False
    # The position of the first match past the page (read where asked: fetch_page).
    next_position: int | None = None


class WalkedNode(NamedTuple):
    event: StoredEvent
    depth: int  # steps from the root
    # The hash the rest of the chain holds this event to: the prev_hash of the event at
    # position + 1, or the log head's hash for the newest event (None: neither exists).
    # The next event may be another tenant's: it is read through ``event_chain_links``,
    # which shows every event's position and prev_hash to a tenant's read (app.db.tenancy).
    sealed_by: bytes | None


@dataclass(frozen=True, slots=True)
class Walk:
    """A bounded piece of the graph around a root: its nodes by depth, then position (the
    root first), and whether ``max_depth`` or the node cap left reachable events out."""

    nodes: list[WalkedNode]
    truncated: bool


# One statement, so one snapshot: the head row moves in the transaction that appends,
# and the newest event a walk sees is the one the head it sees names. The columns come in
# the order _walked reads them: ChainRecord's fields, then the chain and the walk. The
# JSON values and the causes come as JSON text, which _walked hands to orjson: psycopg's
# loaders for jsonb and text[] run in Python, and took a third of fetching a walk.
# The nodes are joined on the primary key alone, the index the chain's next events are
# read through too, so the two lookups of each node meet the same index pages. Asking for
# the tenant here made PostgreSQL look nodes up through (tenant, position) instead: a
# fifth of the statement's time on the bench's store (bench/lineage.py). ``walk`` drops
# nodes of another tenant, which only a forged edge could bring. A ``recorded_at`` past
# what Python holds (infinity: the store never writes one) is read as the nearest it
# holds, and JSON that does not read back (a number past a double) as no value: forged,
# either way the event no longer matches its hash, and the answer says so
# (``chainVerified``) rather than failing whole.
_COLUMNS = """
    SELECT events.position, events.tenant, events.id, events.source, events.type,
           events.subject, events.time_rfc3339,
           least(greatest(events.recorded_at, '0001-01-01T00:00:00Z'),
                 '9999-12-31T23:59:59.999999Z'),
           events.stream,
           events.stream_version, events.datacontenttype, events.dataschema,
           events.data IS NOT NULL OR events.data_binary IS NOT NULL, events.data::text,
           events.data_binary, events.extensions::text, array_to_json(events.causes)::text,
           events.correlation_id,
           events.model_name, events.model_version, events.model_signature,
           events.prev_hash, events.hash,
           walked.depth, walked.truncated, coalesce(after.prev_hash, head.hash)
"""
_NODES = """
    JOIN events ON events.position = walked.node
    LEFT JOIN event_chain_links AS after ON after.position = events.position + 1
    LEFT JOIN log_head AS head ON head.position = events.position"""
# Put together from the constants above alone: every value goes as a parameter.
_WALK = (
    _COLUMNS
    + """
    FROM events AS root
    JOIN LATERAL causeway_walk(root.position, %(direction)s, %(max_depth)s, %(max_nodes)s)
         AS walked (node, depth, truncated) ON true
"""
    + _NODES
    + """
    WHERE root.tenant = %(tenant)s AND root.id = %(id)s
    ORDER BY walked.depth, events.position
"""
)
# ``_WALK`` from several roots at once (``causeway_walk_from``, one way): those of the ids
# the tenant has. None of them: no row.
_WALK_FROM = (
    _COLUMNS  # noqa: S608 - the constants above alone; every value a parameter
    + """
    FROM (
        SELECT array_agg(position ORDER BY position) AS positions FROM events
        WHERE tenant = %(tenant)s AND id = ANY (%(ids)s)
    ) AS roots
    JOIN LATERAL causeway_walk_from(roots.positions, %(direction)s, %(max_depth)s, %(max_nodes)s)
         AS walked (node, depth, truncated) ON true
"""
    + _NODES
    + """
    ORDER BY walked.depth, events.position
"""
)


def _row_without_content() -> tuple[Any, ...]:
    """``full_row()``'s columns, with no data, no binary data and no extensions (empty)."""
    kept = [
        null().label(c.name)
        if c.name in ("data", "data_binary")
        else cast(literal("{}"), JSONB).label(c.name)
        if c.name == "extensions"
        else c
        for c in events.c
    ]
    return (*kept, events.c.data.is_not(None).label("has_json_data"))


def _stored(row: Any) -> StoredEvent:
    return StoredEvent(record_from_row(row), bytes(row.prev_hash), bytes(row.hash))


def _walked(values: Sequence[Any]) -> tuple[WalkedNode, bool]:
    """One row of ``_WALK`` as its node, and the walk's ``truncated`` (on every row)."""
    (
        position, tenant, id_, source, type_, subject, time, recorded_at, stream, version,
        content_type, schema, has_data, data, binary, extensions, causes, correlation_id,
        model_name, model_version, model_signature, prev_hash, hash_, depth, truncated,
        sealed_by,
    ) = values  # fmt: skip
    data_value, extensions_value = _json(data), _json(extensions)
    forged = (
        data_value is _UNREADABLE or extensions_value is _UNREADABLE
        or recorded_at in _TIME_BOUNDS
    )  # fmt: skip
    record = ChainRecord(
        position, tenant, id_, source, type_, subject, time, recorded_at, stream, version,
        content_type, schema, has_data, None if data_value is _UNREADABLE else data_value,
        None if binary is None else bytes(binary),
        {} if extensions_value is _UNREADABLE else extensions_value,
        tuple(orjson.loads(causes)), correlation_id, model_name, model_version,
        model_signature,
    )  # fmt: skip
    event = StoredEvent(record, bytes(prev_hash), bytes(hash_))
    if forged:  # what is shown is not what is stored: no hash seals it (b"" is none)
        return WalkedNode(event, depth, b""), truncated
    return WalkedNode(event, depth, None if sealed_by is None else bytes(sealed_by)), truncated


class _Unreadable:
    """JSON text that does not read back (see ``_WALK``)."""


_UNREADABLE = _Unreadable()
# What _WALK reads a recorded_at past Python's datetimes as; no append writes either.
_TIME_BOUNDS = (
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
)


def _json(text: str | None) -> Any:
    """The JSON value of ``text`` (None for none); ``_UNREADABLE`` when it does not read
    back, which nothing the store wrote does (see ``_WALK``): the event then shows no
    data, or no extensions, and is not sealed."""
    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return _UNREADABLE


def _walked_rows(_cursor: Any) -> Callable[[Sequence[Any]], tuple[WalkedNode, bool]]:
    return _walked  # a psycopg row factory: a row maker for any cursor


def _positions(values: Iterable[int]) -> Any:
    return literal(sorted(set(values)), ARRAY(BigInteger))


class GraphReader:
    """Events by id or position, causes and effects of many events at once (DataLoaders'
    batches), and keyset pages, on a SQLAlchemy connection."""

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def fetch_by_ids(self, tenant: str, ids: Sequence[str]) -> dict[str, StoredEvent]:
        rows = await self._conn.execute(
            select(*full_row()).where(
                events.c.tenant == tenant,
                events.c.id == any_(literal(sorted(set(ids)), ARRAY(Text))),
            )
        )
        return {row.id: _stored(row) for row in rows}

    async def fetch_causes(
        self,
        tenant: str,
        positions: Sequence[int],
        *,
        limit: int | None = None,
        content: bool = True,
    ) -> dict[int, list[StoredEvent]]:
        """Each effect's causes, in the order the effect named them; ``limit`` rows in all
        at most (the last effect's list then may be cut); without their data, binary data
        and extensions unless ``content`` (as ``fetch_page``)."""
        effect = events.alias("effect")
        columns = full_row() if content else _row_without_content()
        rows = await self._conn.execute(
            select(event_causes.c.effect.label("of"), *columns)
            .join(events, events.c.position == event_causes.c.cause)
            .join(effect, effect.c.position == event_causes.c.effect)
            .where(
                event_causes.c.effect == any_(_positions(positions)),
                events.c.tenant == tenant,
            )
            .order_by(event_causes.c.effect, func.array_position(effect.c.causes, events.c.id))
            .limit(limit)
        )
        found: dict[int, list[StoredEvent]] = {p: [] for p in positions}
        for row in rows:
            found[row.of].append(_stored(row))
        return found

    async def fetch_effects(
        self,
        tenant: str,
        positions: Sequence[int],
        *,
        first: int,
        after: int,
        limit: int | None = None,
        content: bool = True,
    ) -> dict[int, Page]:
        """A page of each cause's effects in position order (one query for all causes),
        with the position of the effect past it; ``limit`` rows in all at most (then some
        pages may be cut); without their data, binary data and extensions unless
        ``content`` (as ``fetch_page``)."""
        cause = func.unnest(_positions(positions)).table_valued("position").render_derived("cause")
        columns = full_row() if content else _row_without_content()
        page = (
            select(*columns)
            .join(event_causes, event_causes.c.effect == events.c.position)
            .where(
                event_causes.c.cause == cause.c.position,
                events.c.tenant == tenant,
                events.c.position > after,
            )
            .order_by(events.c.position)
            .limit(first + 1)
            .lateral("page")
        )
        rows = await self._conn.execute(
            select(cause.c.position.label("of"), page)
            .select_from(cause.join(page, true()))
            .limit(limit)
        )
        grouped: dict[int, list[StoredEvent]] = {p: [] for p in positions}
        for row in rows:
            grouped[row.of].append(_stored(row))
        earlier: set[int] = set()
        if after > 0:
            # Causes and effects are one tenant's (checked at append).
            earlier = set(
                await self._conn.scalars(
                    select(event_causes.c.cause)
                    .where(
                        event_causes.c.cause == func.any(_positions(positions)),
                        event_causes.c.effect <= after,
                    )
                    .distinct()
                )
            )
        return {
            p: Page(
                found[:first],
                len(found) > first,
                p in earlier,
                found[first].position if len(found) > first else None,
            )
            for p, found in grouped.items()
        }

    async def fetch_page(
        self, tenant: str, selection: EventFilter, *, first: int, content: bool = True
    ) -> Page:
        """Events matching ``selection`` after ``selection.after``, ``first`` at most;
        without their data, binary data and extensions unless ``content`` (a page whose
        answer shows none of them held them all: 500 events of 1 MiB for a page of ids)."""
        columns = full_row() if content else _row_without_content()
        statement = apply_filter(select(*columns), tenant, selection).limit(first + 1)
        found = [_stored(row) for row in await self._conn.execute(statement)]
        more = len(found) > first
        return Page(found[:first], more, next_position=found[first].position if more else None)


async def walk(
    conn: PsycopgConnection[Any],
    tenant: str,
    event_id: str,
    direction: Direction,
    *,
    max_depth: int,
    max_nodes: int,
) -> Walk | None:
    """Breadth-first from the event ``event_id``, in one statement: the walk itself is
    ``causeway_walk`` (``sql/causeway_walk.sql``), and each node comes with its full row
    and the hash the chain after it names for it (``WalkedNode.sealed_by``). Edges join
    events of one tenant only (causes are checked at append), so the walk stays in the
    root's tenant. None when there is no such event.

    On the driver itself (``app.db.engine.DriverPool``): one statement, built once, whose
    rows (full events, up to max_nodes of them) are the answer's bulk; SQLAlchemy's row
    processing would cost more than PostgreSQL's walk."""
    bounds = {"direction": direction.value, "max_depth": max_depth, "max_nodes": max_nodes}
    return await _walk(conn, _WALK, {"tenant": tenant, "id": event_id, **bounds})


async def walk_from(
    conn: PsycopgConnection[Any],
    tenant: str,
    event_ids: Sequence[str],
    direction: Direction,
    *,
    max_depth: int,
    max_nodes: int,
) -> Walk | None:
    """``walk`` from every event of ``event_ids`` at once (``causeway_walk_from``, in
    ``sql/causeway_walk_from.sql``): they are the nodes at depth 0, and each node is
    reached once, at its distance from the nearest of them, however many of them lead to
    it. One way only (not BOTH). None when the tenant has none of them."""
    if direction is Direction.BOTH:
        raise ValueError("a walk from several events goes one way")
    bounds = {"direction": direction.value, "max_depth": max_depth, "max_nodes": max_nodes}
    ids = list(dict.fromkeys(event_ids))
    return await _walk(conn, _WALK_FROM, {"tenant": tenant, "ids": ids, **bounds})


async def _walk(
    conn: PsycopgConnection[Any], statement: str, params: dict[str, Any]
) -> Walk | None:
    # Binary results: the server skips its text output functions (bytea as hex,
    # timestamps, integers) for every node; the JSON columns come as text (see _WALK).
    async with conn.cursor(row_factory=_walked_rows, binary=True) as cursor:
        await cursor.execute(statement, params)
        rows = await cursor.fetchall()
    if not rows:
        return None
    nodes = [node for node, _ in rows if node.event.record.tenant == params["tenant"]]
    return Walk(nodes, rows[0][1])
