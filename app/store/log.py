"""The event log: the only code that inserts into ``events`` and ``event_causes``.

Rows are never updated or deleted (triggers from the first migration refuse it). Every
append first locks the single ``log_head`` row, then reads, so appends are serialised in
the database: positions are dense and commit order equals position order, across
processes too. The caller owns the transaction; nothing here commits.

``append_many`` writes several requests in one transaction (group commit): each request
is atomic on its own, planned in memory against the stored state (``_plan``), and all
accepted rows go in with one COPY per table. An event's id is unique in its tenant: a
re-sent event (same source, id and content) is reported as a duplicate with its stored
position; the same id with other content, or from another source, is an ``IdConflict``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
from psycopg import AsyncClientCursor, AsyncCopy, AsyncCursor
from psycopg import AsyncConnection as PsycopgConnection
from psycopg.rows import namedtuple_row
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.engine import driver_of
from app.db.tables import events
from app.errors import AppError
from app.store._plan import GroupPlan, Key, Known, ModelKey, Row
from app.store.chain import ChainRecord
from app.store.models import REGISTERED, Registration, registration_from, registration_id
from app.store.records import Appended, NewEvent
from app.store.timestamps import parse_rfc3339

Outcome = list[Appended] | AppError
NOTIFY_CHANNEL = "causeway_events"

_EVENT_COLUMNS = (
    "position", "tenant", "id", "source", "type", "subject", "time", "time_rfc3339",
    "recorded_at", "stream", "stream_version", "datacontenttype", "dataschema", "data",
    "data_binary", "extensions", "causes", "correlation_id", "model_name", "model_version",
    "model_signature", "prev_hash", "hash",
)  # fmt: skip
_COPY_EVENTS = f"COPY events ({', '.join(_EVENT_COLUMNS)}) FROM STDIN"
_COPY_EDGES = "COPY event_causes (effect, cause) FROM STDIN"


class EventLog:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def append(self, tenant: str, batch: Sequence[NewEvent]) -> list[Appended]:
        """Append ``batch`` atomically, in order; raise before writing anything on error."""
        [outcome] = await self.append_many([(tenant, batch)])
        if isinstance(outcome, AppError):
            raise outcome
        return outcome

    async def append_many(
        self, requests: Sequence[tuple[str, Sequence[NewEvent]]]
    ) -> list[Outcome]:
        """Plan every request (tenant, events), write the accepted ones, and give each
        request its own outcome: where its events landed, or the error that refused it."""
        return await append_on(await driver_of(self._conn), requests)


async def append_on(
    driver: PsycopgConnection[Any],
    requests: Sequence[tuple[str, Sequence[NewEvent]]],
    *,
    commit: bool = False,
) -> list[Outcome]:
    """``EventLog.append_many`` on a psycopg connection in a transaction the caller owns.
    The log head stays locked from here to the commit, so every statement goes straight
    to the driver: SQLAlchemy's per-statement work would lengthen the one section that no
    two appends share.

    ``commit``: the transaction is this call's, on a connection in autocommit mode. It
    begins in the round trip that locks the head and commits in the one that moves the
    head (or, when nothing was written, on its own). It is READ COMMITTED whatever the
    database's default: the lookups must see what the group before committed."""
    if commit and not driver.autocommit:
        raise ValueError("append_on(commit=True) needs a connection in autocommit mode")
    if not any(batch for _, batch in requests):
        return [[] for _ in requests]
    ids = {(t, e.id) for t, batch in requests for e in batch}
    causes = {(t, c) for t, batch in requests for e in batch for c in e.causes} - ids
    streams = {(t, e.stream) for t, batch in requests for e in batch}
    models = {
        (t, e.model_name, e.model_version)
        for t, batch in requests
        for e in batch
        if e.model_name is not None and e.model_version is not None
    }
    wanted = {(tenant, registration_id(name, version)) for tenant, name, version in models}
    # Lock first, then read: a statement that both waited for the lock and read the
    # tail would see a snapshot from before the wait. The lookups go in the same query
    # string as the lock, statements PostgreSQL runs in order, each with a snapshot taken
    # after the lock, so the head is held for one round trip here, not four. One simple
    # query (its values bound by psycopg on the client) costs the client about a third
    # less CPU than a pipeline of the same statements did, in the section of every group
    # that no other group shares. The events re-sent ids name and the registrations of
    # the models named come in one lookup, and causes are looked up only when there are
    # some: each statement costs the group about as much CPU as planning ten events.
    # None is prepared: a prepared statement settles on a generic plan made while the
    # log was small (a hash join over a sequential scan of events) and keeps it as the
    # log grows.
    statements = ["BEGIN ISOLATION LEVEL READ COMMITTED"] if commit else []
    statements += [_LOCK_HEAD, _FETCH_KNOWN, _FETCH_VERSIONS]
    params = {**_pair_params(ids | wanted), **_pair_params(streams, prefix="stream_")}
    if causes:
        statements.append(_FETCH_POSITIONS)
        params.update(_pair_params(causes, prefix="cause_"))
    # The values are in the query's text, so PostgreSQL's log of a failed statement shows
    # the ids and streams looked up (never an event's data).
    async with AsyncClientCursor(driver, row_factory=namedtuple_row) as cursor:
        try:
            await cursor.execute("; ".join(statements), params)
        except UnicodeEncodeError as exc:
            raise _unsendable(exc, driver.info.encoding) from exc
        if commit:
            cursor.nextset()  # BEGIN's
        head: Any = await cursor.fetchone()
        if head is None:
            raise RuntimeError("the log_head row is missing: the schema is not migrated")
        cursor.nextset()
        found: list[Any] = await cursor.fetchall()
        cursor.nextset()
        version_rows: list[Any] = await cursor.fetchall()
        cause_rows: list[Any] = []
        if causes:
            cursor.nextset()
            cause_rows = await cursor.fetchall()
    group = GroupPlan(
        position=int(head.position),
        prev_hash=bytes(head.hash),
        stored=_known_from([r for r in found if (r.tenant, r.id) in ids]),
        positions={(r.tenant, r.id): r.position for r in cause_rows},
        versions={(r.tenant, r.stream): int(r.version) for r in version_rows if r.version},
        recorded_at=datetime.now(UTC),
        registrations=_registrations_from([r for r in found if (r.tenant, r.id) in wanted]),
    )
    # The rows of each request go out as soon as it is planned, so that PostgreSQL takes
    # them in while the next request is planned: the head is locked meanwhile.
    outcomes: list[Outcome] = []
    pending = iter(requests)
    for tenant, batch in pending:  # a group of re-sends and refusals writes nothing
        outcomes.append(group.plan(tenant, batch))
        if group.rows:
            break
    if not group.rows:
        if commit:
            await driver.commit()  # nothing to keep; the head is free again
        return outcomes
    async with driver.cursor() as cursor:
        # The lines go out in the connection's own encoding, as psycopg's adapters would
        # send them; PostgreSQL converts to the database's.
        encoding = cursor.connection.info.encoding
        recorded_at = group.recorded_at.isoformat()
        async with cursor.copy(_COPY_EVENTS) as copy:
            sent = await _send(copy, group.rows, 0, recorded_at, encoding)
            for tenant, batch in pending:
                outcomes.append(group.plan(tenant, batch))
                sent = await _send(copy, group.rows, sent, recorded_at, encoding)
        await _finish(cursor, group, commit=commit)
    return outcomes


async def _send(
    copy: AsyncCopy, rows: list[Row], sent: int, recorded_at: str, encoding: str
) -> int:
    """Send ``rows[sent:]`` as COPY lines; how many rows are sent now."""
    for start in range(sent, len(rows), _COPY_CHUNK):
        chunk = rows[start : start + _COPY_CHUNK]
        lines = "".join([copy_line(row, recorded_at) for row in chunk])
        await copy.write(_encoded(lines, encoding))
    return len(rows)


async def _finish(cursor: AsyncCursor[Any], group: GroupPlan, *, commit: bool) -> None:
    """The group's edges, and the head moved past its rows (and the commit)."""
    if group.edges:
        async with cursor.copy(_COPY_EDGES) as copy:
            await copy.write("".join([f"{e}\t{c}\n" for e, c in group.edges]).encode())
    # Move the head, and send projection runners a wake-up hint (delivered at commit;
    # they poll anyway), in one round trip, with the commit when it is ours. The hint
    # names the head and the types appended, so a runner wakes only the projections
    # that read them.
    async with AsyncClientCursor(cursor.connection) as moving:
        await moving.execute(
            _MOVE_HEAD + ("; COMMIT" if commit else ""),
            {
                "position": group.position,
                "hash": group.prev_hash,
                "hint": wake_hint(group.position, {row.event.type for row in group.rows}),
            },
        )


# COPY's text format, written here rather than by psycopg's per-value adapters: one row
# is one line of tab-separated fields, \N is NULL, and a backslash, tab, newline or
# carriage return inside a field is escaped. (This took a third of the append's time.)
_COPY_CHUNK = 256
_NULL = "\\N"


def copy_line(row: Row, recorded_at: str) -> str:
    """``row`` as one line of ``_COPY_EVENTS`` input; ``recorded_at`` in ISO 8601."""
    event = row.event
    if event.data_binary is not None or not event.has_data:
        data = None
    else:
        data = orjson.dumps(event.data).decode()  # JSON null when data is None
    fields = (
        str(row.position),
        row.tenant,
        event.id,
        event.source,
        event.type,
        event.subject,
        # In UTC: PostgreSQL refuses offsets past ±15:59, which RFC 3339 allows.
        _time_column(event),
        event.time,
        recorded_at,
        event.stream,
        str(row.stream_version),
        event.datacontenttype,
        event.dataschema,
        data,
        None if event.data_binary is None else _bytea(event.data_binary),
        orjson.dumps(event.extensions).decode(),
        _text_array(event.causes),
        event.correlation_id,
        event.model_name,
        event.model_version,
        event.model_signature,
        _bytea(row.prev_hash),
        _bytea(row.hash),
    )
    line = "\t".join([_NULL if f is None else f for f in fields])
    # Most lines need no escaping: then their only backslashes are those of the NULLs
    # and of the bytea prefixes (written escaped), and their only tabs separate fields.
    written = fields.count(None) + _BACKSLASHES_PER_LINE + (event.data_binary is not None) * 2
    if (
        line.count("\\") == written
        and line.count("\t") == len(fields) - 1
        and "\n" not in line
        and "\r" not in line
    ):
        return line + "\n"
    escaped = [
        _NULL if f is None else f if i in _BYTEA_FIELDS else _escaped(f)
        for i, f in enumerate(fields)
    ]
    return "\t".join(escaped) + "\n"


def _time_column(event: NewEvent) -> str | None:
    """The ``time`` column: the instant of the ``time`` text (``causeway verify`` holds
    the two together), from ``time_value`` as ingest parsed it, or parsed here for an
    event built in code with the text only."""
    value = event.time_value
    if value is None and event.time is not None:
        value, _ = parse_rfc3339(event.time)
    return None if value is None else value.astimezone(UTC).isoformat()


def _encoded(text: str, encoding: str) -> bytes:
    try:
        return text.encode(encoding)
    except UnicodeEncodeError as exc:
        raise _unsendable(exc, encoding) from exc


def _unsendable(exc: UnicodeEncodeError, encoding: str) -> psycopg.DataError:
    """What a value the connection's encoding cannot carry is: a bad value (SQLSTATE
    class 22), which fails only the request that sent it."""
    return psycopg.DataError(
        f"a character cannot be sent in the connection's encoding {encoding}: {exc.reason}"
    )


def _escaped(value: str) -> str:
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    )


_BYTEA_PREFIX = "\\\\x"  # bytea's hex input, its backslash escaped for COPY
_BACKSLASHES_PER_LINE = 4  # the prefixes of prev_hash and hash
_BYTEA_FIELDS = frozenset(
    _EVENT_COLUMNS.index(name) for name in ("data_binary", "prev_hash", "hash")
)


def _bytea(value: bytes) -> str:
    return _BYTEA_PREFIX + value.hex()


def _text_array(values: Sequence[str]) -> str:
    """A ``text[]`` literal: every element double-quoted, so no element needs more."""
    if not values:
        return "{}"
    quoted = (v.replace("\\", "\\\\").replace('"', '\\"') for v in values)
    return "{" + ",".join(f'"{v}"' for v in quoted) + "}"


def wake_hint(position: int, types: set[str]) -> str:
    """The NOTIFY payload: ``<head> <type> <type> ...``, or just the head when the types
    would not fit PostgreSQL's 8,000-byte payload (then every projection wakes)."""
    hint = " ".join([str(position), *sorted(types)])
    return hint if len(hint.encode()) < 7_000 else str(position)


def read_wake_hint(payload: str) -> frozenset[str] | None:
    """The types a ``wake_hint`` names; None when it names none (wake every projection)."""
    types = frozenset(payload.split()[1:])
    return types or None


def _known_from(rows: list[Any]) -> dict[Key, Known]:
    return {
        (row.tenant, row.id): Known(row.position, row.stream_version, record_from_row(row))
        for row in rows
    }


def _registrations_from(rows: list[Any]) -> dict[ModelKey, Registration]:
    found = [record_from_row(row) for row in rows]
    return {
        (record.tenant, record.model_name or "", record.model_version or ""): (
            registration_from(record.data, record.model_signature or "")
        )
        for record in found
        if record.type == REGISTERED
    }


def _pair_params(keys: Iterable[Key], *, prefix: str = "") -> dict[str, str]:
    """``(tenant, name)`` pairs as two ``text[]`` literals, unnested in SQL: one parameter
    each, however many pairs; named ``{prefix}tenants`` and ``{prefix}names``. Written
    here, psycopg quotes each as one string: its list dumper, quoting element by element,
    took three times as long, in the section of a group that no other group shares."""
    ordered = sorted(keys)
    return {
        f"{prefix}tenants": _text_array([k[0] for k in ordered]),
        f"{prefix}names": _text_array([k[1] for k in ordered]),
    }


_LOCK_HEAD = "SELECT position, hash FROM log_head FOR UPDATE"
# The channel name is NOTIFY_CHANNEL's.
_MOVE_HEAD = """
    WITH moved AS (
        UPDATE log_head SET position = %(position)s, hash = %(hash)s RETURNING position
    )
    SELECT pg_notify('causeway_events', %(hint)s) FROM moved
"""
_FETCH_KNOWN = """
    SELECT events.*, events.data IS NOT NULL AS has_json_data
    FROM events
    JOIN unnest(%(tenants)s::text[], %(names)s::text[]) AS wanted (tenant, id)
      ON events.tenant = wanted.tenant AND events.id = wanted.id
"""
_FETCH_POSITIONS = """
    SELECT events.tenant, events.id, events.position
    FROM events
    JOIN unnest(%(cause_tenants)s::text[], %(cause_names)s::text[]) AS wanted (tenant, id)
      ON events.tenant = wanted.tenant AND events.id = wanted.id
"""
_FETCH_VERSIONS = """
    SELECT wanted.tenant, wanted.stream,
           (SELECT max(events.stream_version) FROM events
             WHERE events.tenant = wanted.tenant AND events.stream = wanted.stream) AS version
    FROM unnest(%(stream_tenants)s::text[], %(stream_names)s::text[]) AS wanted (tenant, stream)
"""


def full_row() -> tuple[Any, ...]:
    """The columns ``record_from_row`` needs: all of ``events``, and whether ``data`` is set
    (a JSON ``null`` loads as ``None`` too, so SQL has to tell)."""
    return (events, events.c.data.is_not(None).label("has_json_data"))


def record_from_row(row: Any) -> ChainRecord:
    """The chain record of a stored ``events`` row, selected with ``full_row()``."""
    # Positional, in ChainRecord's field order: keywords cost three times as much, and
    # every read of full events (walks, projections, verification) builds these.
    return ChainRecord(
        row.position,
        row.tenant,
        row.id,
        row.source,
        row.type,
        row.subject,
        row.time_rfc3339,
        row.recorded_at,
        row.stream,
        row.stream_version,
        row.datacontenttype,
        row.dataschema,
        bool(row.has_json_data) or row.data_binary is not None,
        row.data,
        bytes(row.data_binary) if row.data_binary is not None else None,
        row.extensions,
        tuple(row.causes),
        row.correlation_id,
        row.model_name,
        row.model_version,
        row.model_signature,
    )
