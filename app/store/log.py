"""The event log: appending under the lock, and what appending looks up.

Rows are never updated or deleted (triggers from the first migration refuse it). Every
write goes through ``causeway_append`` or ``causeway_append_shared`` (``writes``), which
lock the single ``log_head`` row, insert the rows, move the head and may send the wake-up
hint: appends are serialised in the database, so positions are dense and commit order
equals position order, across processes too. Nothing here commits a transaction it does
not own.

A group of requests is planned in memory (``_plan``: every request atomic on its own,
the hash chain computed in the same pass) on facts read from the log: here, under the
lock (``append_on``, for any caller and any transaction), or before it, from what an
appender knows of the tail (``tail_cache.TailCache``, ``fetch_facts`` and ``writes``, one round trip
and no planning under the lock). An event's id is unique in its tenant: a re-sent event
(same source, id and content) is reported as a duplicate with its stored position; the
same id with other content, or from another source, is an ``IdConflict``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from psycopg import AsyncClientCursor
from psycopg import AsyncConnection as PsycopgConnection
from psycopg.rows import namedtuple_row
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.engine import driver_of
from app.db.tables import events, log_head
from app.errors import AppError
from app.store.append.planning import GroupPlan, Head, Key, ModelKey, SeenEvent, StoredFacts
from app.store.append.writes import unsendable, write_group
from app.store.chain import ChainRecord
from app.store.model_registry import REGISTERED, Registration, registration_from, registration_id
from app.store.records import Appended, NewEvent

Outcome = list[Appended] | AppError


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
class LockedAppend:
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
) -> LockedAppend:
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
        return LockedAppend([[] for _ in requests], None, None)
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
    return LockedAppend(outcomes, locked, group if group.rows else None)


async def fetch_facts(
    driver: PsycopgConnection[Any],
    streams: Iterable[Key],
    causes: Iterable[Key],
    models: Iterable[ModelKey],
) -> StoredFacts:
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
    facts = StoredFacts()
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
            raise unsendable(exc, driver.info.encoding) from exc
        yield cursor


def _registration_keys(requests: Sequence[tuple[str, Sequence[NewEvent]]]) -> set[Key]:
    """The ids of the registration events of the models ``requests`` name."""
    return {
        (tenant, registration_id(e.model_name, e.model_version))
        for tenant, batch in requests
        for e in batch
        if e.model_name is not None and e.model_version is not None
    }


def _text_array(values: Sequence[str]) -> str:
    """A ``text[]`` literal: every element double-quoted, so no element needs more."""
    if not values:
        return "{}"
    quoted = (v.replace("\\", "\\\\").replace('"', '\\"') for v in values)
    return "{" + ",".join(f'"{v}"' for v in quoted) + "}"


def _known_from(rows: list[Any]) -> dict[Key, SeenEvent]:
    return {
        (row.tenant, row.id): SeenEvent(row.position, row.stream_version, record_from_row(row))
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


async def hold_head(conn: AsyncConnection) -> None:
    """Lock the log's head in ``conn``'s transaction, to its end, before an append in it:
    what the transaction reads from then on, no other append lands beside (an append
    waits for the head). For a decision that must not race another one's append."""
    await conn.exec_driver_sql(_LOCK_HEAD)


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
           (SELECT events.stream_version FROM events
             WHERE events.tenant = wanted.tenant AND events.stream = wanted.stream
             ORDER BY events.stream_version DESC LIMIT 1) AS version
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


async def read_head_link(conn: AsyncConnection) -> tuple[int, bytes]:
    """The log's head: its position and the hash it holds (the last event's)."""
    row = (await conn.execute(select(log_head.c.position, log_head.c.hash))).one()
    return int(row.position), bytes(row.hash)


async def read_hash_at(conn: AsyncConnection, position: int) -> bytes | None:
    """The hash of the event at ``position``; None when the log holds none there."""
    found = await conn.scalar(select(events.c.hash).where(events.c.position == position))
    return None if found is None else bytes(found)
