"""The event log: the only code that writes ``events`` and ``event_causes``.

Rows are never updated or deleted (triggers from the first migration refuse it). Every
write goes through ``causeway_append`` (migrations 0008 and 0011), which locks the single
``log_head`` row, checks that the head is where the group was planned on, inserts the
rows, moves the head and sends the wake-up hint (unless the caller sends it later:
``notify=False`` and ``send_wake_hint``): appends are serialised in the database, so
positions are dense and commit order equals position order, across processes too.
Nothing here commits a transaction it does not own.

A group of requests is planned in memory (``_plan``: every request atomic on its own,
the hash chain computed in the same pass) on facts read from the log: here, under the
lock (``append_on``, for any caller and any transaction), or before it, from what an
appender knows of the tail (``tail.Tail`` and ``write_group``, one round trip and no
planning under the lock). An event's id is unique in its tenant: a re-sent event (same
source, id and content) is reported as a duplicate with its stored position; the same id
with other content, or from another source, is an ``IdConflict``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
from psycopg import AsyncClientCursor
from psycopg import AsyncConnection as PsycopgConnection
from psycopg.rows import namedtuple_row
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.engine import driver_of
from app.db.tables import events
from app.errors import AppError
from app.store._plan import Facts, GroupPlan, Head, Key, Known, ModelKey, Row
from app.store.chain import ChainRecord
from app.store.models import REGISTERED, Registration, registration_from, registration_id
from app.store.records import Appended, NewEvent
from app.store.timestamps import parse_rfc3339

Outcome = list[Appended] | AppError
NOTIFY_CHANNEL = "causeway_events"


class HeadMoved(Exception):
    """``causeway_append`` found the head elsewhere than the group was planned on, and
    wrote nothing. ``behind``: the head had not reached it yet (the groups planned before
    this one were still on their way, or failed); else another writer appended."""

    def __init__(self, detail: str, *, found: int, planned: int) -> None:
        super().__init__(detail)
        self.found = found
        self.planned = planned

    @property
    def behind(self) -> bool:
        return self.found < self.planned


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
        landed = await append_on(await driver_of(self._conn), requests)
        return landed.outcomes


@dataclass(frozen=True, slots=True)
class Landed:
    """What ``append_on`` did: each request's outcome, the head it found under the lock,
    and the group it wrote (None when it wrote nothing)."""

    outcomes: list[Outcome]
    found: Head | None
    group: GroupPlan | None


async def append_on(
    driver: PsycopgConnection[Any],
    requests: Sequence[tuple[str, Sequence[NewEvent]]],
    *,
    commit: bool = False,
    notify: bool = True,
) -> Landed:
    """``EventLog.append_many`` on a psycopg connection in a transaction the caller owns:
    lock the head, read what planning needs, plan, write. The head stays locked from the
    first statement to the commit, so every statement goes straight to the driver.

    ``commit``: the transaction is this call's, on a connection in autocommit mode. It
    begins in the round trip that locks the head and commits in the one that writes (or
    at once, when nothing was written). It is READ COMMITTED
    whatever the database's default: the lookups must see what the group before
    committed."""
    if commit and not driver.autocommit:
        raise ValueError("append_on(commit=True) needs a connection in autocommit mode")
    if not any(batch for _, batch in requests):
        return Landed([[] for _ in requests], None, None)
    ids = {(t, e.id) for t, batch in requests for e in batch}
    causes = {(t, c) for t, batch in requests for e in batch for c in e.causes} - ids
    streams = {(t, e.stream) for t, batch in requests for e in batch}
    wanted = _registration_keys(requests)
    # Lock first, then read: a statement that both waited for the lock and read the
    # tail would see a snapshot from before the wait. The lookups go in the same query
    # string as the lock, statements PostgreSQL runs in order, each with a snapshot taken
    # after the lock, so the head is held for one round trip here, not four. The events
    # re-sent ids name and the registrations of the models named come in one lookup, and
    # causes are looked up only when there are some. None is prepared: a prepared
    # statement settles on a generic plan made while the log was small (a hash join over
    # a sequential scan of events) and keeps it as the log grows.
    statements = ["BEGIN ISOLATION LEVEL READ COMMITTED"] if commit else []
    statements += [_LOCK_HEAD, _FETCH_KNOWN, _FETCH_VERSIONS]
    params = {**_pair_params(ids | wanted), **_pair_params(streams, prefix="stream_")}
    if causes:
        statements.append(_FETCH_POSITIONS)
        params.update(_pair_params(causes, prefix="cause_"))
    async with _looked_up(driver, statements, params) as cursor:
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
    locked = Head(int(head.position), bytes(head.hash))
    known = _known_from([r for r in found if (r.tenant, r.id) in ids])
    positions = {(r.tenant, r.id): r.position for r in cause_rows}
    positions.update({key: k.position for key, k in known.items()})  # re-sent, then cited
    group = GroupPlan(
        position=locked.position,
        prev_hash=locked.hash,
        known=known,
        positions=positions,
        versions={(r.tenant, r.stream): int(r.version) for r in version_rows if r.version},
        recorded_at=datetime.now(UTC),
        registrations=_registrations_from([r for r in found if (r.tenant, r.id) in wanted]),
    )
    outcomes: list[Outcome] = [group.plan(tenant, batch) for tenant, batch in requests]
    if group.rows:
        await write_group(driver, locked, group, commit=commit, notify=notify)
    elif commit:
        await driver.commit()  # nothing to keep; the head is free again
    return Landed(outcomes, locked, group if group.rows else None)


async def write_group(
    driver: PsycopgConnection[Any],
    after: Head,
    group: GroupPlan,
    *,
    commit: bool = False,
    notify: bool = True,
) -> None:
    """Write ``group``, planned on the head ``after``, with ``causeway_append``: in the
    caller's transaction (``commit``: and commit it, in the same round trip), or in its
    own on a connection in autocommit mode. Raises ``HeadMoved`` when the head is
    elsewhere (nothing is written then). ``notify=False``: without the wake-up hint, for
    a caller that sends it once the group is committed (``send_wake_hint``)."""
    params = (
        after.position,
        after.hash,
        group.position,
        group.prev_hash,
        group.recorded_at,
        _event_rows(group.rows),
        orjson.dumps(group.edges).decode(),
        wake_hint(group.position, appended_types(group)) if notify else None,
    )
    try:
        if commit:
            async with driver.pipeline():
                await driver.execute(_APPEND, params, prepare=True)
                await driver.execute("COMMIT")
        else:
            await driver.execute(_APPEND, params, prepare=True)
    except UnicodeEncodeError as exc:
        raise _unsendable(exc, driver.info.encoding) from exc
    except psycopg.errors.SerializationFailure as exc:
        found = exc.diag.message_detail
        if found is None or not found.isdigit():  # not causeway_append's own refusal
            raise
        raise HeadMoved(
            exc.diag.message_primary or "", found=int(found), planned=after.position
        ) from exc


async def fetch_facts(
    driver: PsycopgConnection[Any],
    streams: Iterable[Key],
    causes: Iterable[Key],
    models: Iterable[ModelKey],
) -> Facts:
    """Stream versions, the positions of ids and the registrations of models, as stored
    now, without locking anything: for an appender that plans before it locks
    (``causeway_append`` refuses the group if the log moved on meanwhile). One round trip,
    only the statements asked for."""
    statements: list[str] = []
    params: dict[str, str] = {}
    wanted = {(tenant, registration_id(name, version)) for tenant, name, version in models}
    streams, causes = set(streams), set(causes)
    for keys, statement, prefix in (
        (streams, _FETCH_VERSIONS, "stream_"),
        (causes, _FETCH_POSITIONS, "cause_"),
        (wanted, _FETCH_KNOWN, ""),
    ):
        if keys:
            statements.append(statement)
            params.update(_pair_params(keys, prefix=prefix))
    facts = Facts()
    if not statements:
        return facts
    async with _looked_up(driver, statements, params) as cursor:
        if streams:
            version_rows: list[Any] = await cursor.fetchall()
            facts.versions = {(r.tenant, r.stream): int(r.version or 0) for r in version_rows}
            cursor.nextset()
        if causes:
            cause_rows: list[Any] = await cursor.fetchall()
            facts.positions = {(r.tenant, r.id): r.position for r in cause_rows}
            cursor.nextset()
        if wanted:
            facts.registrations = _registrations_from(await cursor.fetchall())
    return facts


@asynccontextmanager
async def _looked_up(
    driver: PsycopgConnection[Any], statements: list[str], params: dict[str, str]
) -> AsyncIterator[AsyncClientCursor[Any]]:
    """``statements`` run in one round trip, their results to read in order. The values
    are in the query's text, so PostgreSQL's log of a failed statement shows the ids and
    streams looked up (never an event's data)."""
    async with AsyncClientCursor(driver, row_factory=namedtuple_row) as cursor:
        try:
            await cursor.execute("; ".join(statements), params)
        except UnicodeEncodeError as exc:
            raise _unsendable(exc, driver.info.encoding) from exc
        yield cursor


def _registration_keys(requests: Sequence[tuple[str, Sequence[NewEvent]]]) -> set[Key]:
    """The ids of the registration events of the models ``requests`` name."""
    return {
        (tenant, registration_id(e.model_name, e.model_version))
        for tenant, batch in requests
        for e in batch
        if e.model_name is not None and e.model_version is not None
    }


def _event_rows(rows: list[Row]) -> str:
    """``rows`` as ``causeway_append`` reads them (migration 0008): a JSON array with
    one array of values per event, JSON data nested as ``[data]`` (``[]`` for none),
    bytes in hex."""
    return orjson.dumps([_event_row(row) for row in rows]).decode()


def _event_row(row: Row) -> list[Any]:
    event = row.event
    binary = event.data_binary
    return [
        row.position,
        row.tenant,
        event.id,
        event.source,
        event.type,
        event.subject,
        _time_column(event),
        event.time,
        event.stream,
        row.stream_version,
        event.datacontenttype,
        event.dataschema,
        # Wrapped: [null] is JSON null data, [] no data.
        [event.data] if binary is None and event.has_data else [],
        None if binary is None else binary.hex(),
        event.extensions,
        event.causes,
        event.correlation_id,
        event.model_name,
        event.model_version,
        event.model_signature,
        row.prev_hash.hex(),
        row.hash.hex(),
    ]


def _time_column(event: NewEvent) -> datetime | None:
    """The ``time`` column: the instant of the ``time`` text (``causeway verify`` holds
    the two together), from ``time_value`` as ingest parsed it, or parsed here for an
    event built in code with the text only. In UTC (orjson writes it, with its offset):
    PostgreSQL refuses offsets past ±15:59, which RFC 3339 allows."""
    value = event.time_value
    if value is None and event.time is not None:
        value, _ = parse_rfc3339(event.time)
    if value is None or value.tzinfo is UTC:
        return value
    return value.astimezone(UTC)


def _unsendable(exc: UnicodeEncodeError, encoding: str) -> psycopg.DataError:
    """What a value the connection's encoding cannot carry is: a bad value (SQLSTATE
    class 22), which fails only the request that sent it."""
    return psycopg.DataError(
        f"a character cannot be sent in the connection's encoding {encoding}: {exc.reason}"
    )


def _text_array(values: Sequence[str]) -> str:
    """A ``text[]`` literal: every element double-quoted, so no element needs more."""
    if not values:
        return "{}"
    quoted = (v.replace("\\", "\\\\").replace('"', '\\"') for v in values)
    return "{" + ",".join(f'"{v}"' for v in quoted) + "}"


def appended_types(group: GroupPlan) -> set[str]:
    """The types of the events ``group`` writes: what its wake-up hint names."""
    return {row.event.type for row in group.rows}


async def send_wake_hint(driver: PsycopgConnection[Any], hint: str) -> None:
    """Send a ``wake_hint`` on its own, for events already committed (in autocommit mode:
    it goes out as the statement commits)."""
    await driver.execute(_NOTIFY, (NOTIFY_CHANNEL, hint), prepare=True)


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
_NOTIFY = "SELECT pg_notify(%s, %s)"
_APPEND = (
    "SELECT causeway_append(%s::bigint, %s::bytea, %s::bigint, %s::bytea, %s::timestamptz,"
    " %s::jsonb, %s::json, %s::text)"
)  # the function sends the NOTIFY_CHANNEL hint, when it is given one
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
