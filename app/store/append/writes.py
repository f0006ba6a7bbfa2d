"""Writing a planned group into the log: the only code that calls ``causeway_append``
(``sql/causeway_append.sql``) and ``causeway_append_shared``
(``sql/causeway_append_shared.sql``), the functions that insert ``events`` and
``event_causes`` under the ``log_head`` lock; and the wake-up hint (NOTIFY) that tells
readers where the head went.

``write_group`` writes a group where it was planned: the function refuses it
(``HeadMoved``) unless the head is exactly the one planned on. ``write_shared`` writes a
group onto whatever head it finds, moving its positions, stream versions and hash chain
there: for an appender that shares the log with other writers. Both write the rows as
planned in ``_plan`` (``_event_rows``: one JSON array of values per event).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
from psycopg import AsyncConnection as PsycopgConnection

from app.store.append.planning import GroupPlan, Head, Key, Row
from app.store.records import NewEvent
from app.store.timestamps import parse_rfc3339

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
    async with _appending(driver, after):
        if commit:
            async with driver.pipeline():
                await driver.execute(_APPEND, params, prepare=True)
                await driver.execute("COMMIT")
        else:
            await driver.execute(_APPEND, params, prepare=True)


@dataclass(frozen=True, slots=True)
class MovedGroup:
    """How a group written by ``write_shared`` was moved from where it was planned: its
    positions by ``shift``, the versions of each stream in ``versions`` by as many; the
    head it left (its last event's position and hash); and the last version of each
    stream the others appended to meanwhile (``others``), or None when they appended
    too much to tell."""

    shift: int
    versions: dict[Key, int]
    head: Head
    others: dict[Key, int] | None


async def write_shared(
    driver: PsycopgConnection[Any], after: Head, group: GroupPlan
) -> MovedGroup | None:
    """Write ``group``, planned on ``after`` with its canonical encodings kept, with
    ``causeway_append_shared`` (``sql/causeway_append_shared.sql``), on a connection in
    autocommit mode: onto the head PostgreSQL finds, which others may have moved past
    ``after``. None when it went in as planned, else how it moved. The stream versions it
    was planned on must be the stored ones as of ``after`` (where others moved them
    since, it is moved too). Raises ``HeadMoved`` when the head is behind ``after``, or
    the log holds no such head (another hash at that position); a key another writer took
    meanwhile raises as PostgreSQL does (an ``IntegrityError``). Nothing is written then.
    No event of ``group`` may carry an expected version: the head's move would not be
    checked against it."""
    canonical, splices = _splices(group.rows)
    params = (
        after.position,
        after.hash,
        group.recorded_at,
        _event_rows(group.rows),
        orjson.dumps(group.edges).decode(),
        canonical,
        splices,
        None,
    )
    async with _appending(driver, after):
        cursor = await driver.execute(_APPEND_SHARED, params, prepare=True)
    found: Any = await cursor.fetchone()
    if found is None or found[0] is None:
        return None
    moved = orjson.loads(found[0])
    shift = int(moved["shift"])
    others = moved["others"]
    return MovedGroup(
        shift,
        {(tenant, stream): int(by) for tenant, stream, by in moved["streams"]},
        Head(group.position + shift, bytes.fromhex(moved["hash"])),
        None if others is None else {(t, stream): int(v) for t, stream, v in others},
    )


def _splices(rows: list[Row]) -> tuple[list[bytes], list[int]]:
    """Each row's canonical encoding, and where in it the digits of its position and of
    its stream version are (four offsets a row, from zero: start and length of each).
    Both are the last of their key in the encoding: keys are sorted, and the values
    after them are strings and numbers, in which a key's quotes would be escaped."""
    canonical: list[bytes] = []
    splices: list[int] = []
    for row in rows:
        encoded = row.canonical
        if encoded is None:
            raise ValueError("write_shared needs a group planned with keep_canonical=True")
        position, version = b"%d" % row.position, b"%d" % row.stream_version
        position_at = encoded.rfind(b'"position":') + len(b'"position":')
        version_at = encoded.rfind(b'"streamversion":') + len(b'"streamversion":')
        if (
            encoded[position_at : position_at + len(position)] != position
            or encoded[version_at : version_at + len(version)] != version
        ):
            raise ValueError(f"event {row.event.id!r}: its encoding does not hold its place")
        canonical.append(encoded)
        splices += [position_at, len(position), version_at, len(version)]
    return canonical, splices


@asynccontextmanager
async def _appending(driver: PsycopgConnection[Any], after: Head) -> AsyncIterator[None]:
    """Driver errors of a ``causeway_append*`` call, as the store's: a value the
    connection cannot send, and the function's refusal of a head that moved."""
    try:
        yield
    except UnicodeEncodeError as exc:
        raise unsendable(exc, driver.info.encoding) from exc
    except psycopg.errors.SerializationFailure as exc:
        found = exc.diag.message_detail
        if found is None or not found.isdigit():  # not causeway_append's own refusal
            raise
        raise HeadMoved(
            exc.diag.message_primary or "", found=int(found), planned=after.position
        ) from exc


def _event_rows(rows: list[Row]) -> str:
    """``rows`` as ``causeway_append`` reads them (``sql/causeway_append.sql``): a JSON
    array with one array of values per event, JSON data nested as ``[data]`` (``[]`` for
    none), bytes in hex."""
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


def unsendable(exc: UnicodeEncodeError, encoding: str) -> psycopg.DataError:
    """What a value the connection's encoding cannot carry is: a bad value (SQLSTATE
    class 22), which fails only the request that sent it."""
    return psycopg.DataError(
        f"a character cannot be sent in the connection's encoding {encoding}: {exc.reason}"
    )


def appended_types(group: GroupPlan) -> set[str]:
    """The types of the events ``group`` writes: what its wake-up hint names."""
    return {row.event.type for row in group.rows}


async def send_wake_hint(driver: PsycopgConnection[Any], hint: str) -> None:
    """Send a ``wake_hint`` on its own, for events already committed (in autocommit mode:
    it goes out as the statement commits)."""
    await driver.execute(_NOTIFY, (NOTIFY_CHANNEL, hint), prepare=True)


def wake_hint(position: int, types: set[str]) -> str:
    """The NOTIFY payload: the head, then each type, a line each (a type may hold a
    blank, never a control character), or just the head when the types would not fit
    PostgreSQL's 8,000-byte payload (then every projection wakes)."""
    hint = "\n".join([str(position), *sorted(types)])
    return hint if len(hint.encode()) < 7_000 else str(position)


def read_wake_hint(payload: str) -> frozenset[str] | None:
    """The types a ``wake_hint`` names; None when it names none (wake every projection)."""
    types = frozenset(payload.split("\n")[1:])
    return types or None


_NOTIFY = "SELECT pg_notify(%s, %s)"
_APPEND = (
    "SELECT causeway_append(%s::bigint, %s::bytea, %s::bigint, %s::bytea, %s::timestamptz,"
    " %s::jsonb, %s::json, %s::text)"
)  # the function sends the NOTIFY_CHANNEL hint, when it is given one
# The encodings and their offsets go in binary: bytes, not hex text, and no parsing.
_APPEND_SHARED = (
    "SELECT causeway_append_shared(%s::bigint, %s::bytea, %s::timestamptz, %s::jsonb,"
    " %s::json, %b::bytea[], %b::bigint[], %s::text)"
)
