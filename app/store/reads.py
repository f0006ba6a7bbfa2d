"""Reads over the log, always within one tenant: single events, streams and replay.

Events leave the store as structured CloudEvents JSON, built by PostgreSQL itself (one
``jsonb`` expression), so replay streams text straight from a server-side cursor to the
client without decoding ``data`` in Python. Besides the CloudEvents attributes each event
carries, as extension attributes of the store's (named and typed as CloudEvents has
them: lower-case letters, strings and integers), ``position``, ``stream``,
``streamversion``, ``storedtime`` (when the store recorded it; a producer's own
``recordedtime``, the Recorded Time extension, is kept as sent), ``prevhash`` and ``hash``
(hex); its causes are ``causationid``, their ids joined by commas. ``position`` and
``streamversion`` are JSON integers: past 2**31 - 1 they leave CloudEvents' Integer range
(a store that long-lived needs consumers that read them as 64-bit; Parquet's columns are).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, Text, any_, bindparam, case, cast, func, literal, select
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ColumnElement

from app.db.engine import DriverStatement, driver_of, server_cursor
from app.db.tables import events
from app.store.records import RESERVED_TYPE_PREFIX, EventFilter


def _structured() -> ColumnElement[Any]:
    e = events.c
    envelope = func.jsonb_strip_nulls(
        func.jsonb_build_object(
            "specversion",
            "1.0",
            "id",
            e.id,
            "source",
            e.source,
            "type",
            e.type,
            "subject",
            e.subject,
            "time",
            e.time_rfc3339,
            "datacontenttype",
            e.datacontenttype,
            "dataschema",
            e.dataschema,
            "correlationid",
            e.correlation_id,
            "causationid",
            func.nullif(func.array_to_string(e.causes, ","), ""),
            "modelname",
            e.model_name,
            "modelversion",
            e.model_version,
            "modelsig",
            e.model_signature,
            "stream",
            e.stream,
            "streamversion",
            e.stream_version,
            "position",
            e.position,
            "storedtime",
            func.to_char(
                func.timezone("UTC", e.recorded_at), literal('YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
            ),
            "prevhash",
            func.encode(e.prev_hash, "hex"),
            "hash",
            func.encode(e.hash, "hex"),
        ),
        type_=JSONB,
    )
    payload = case(
        (
            e.data_binary.is_not(None),
            func.jsonb_build_object(
                "data_base64", func.translate(func.encode(e.data_binary, "base64"), "\n", "")
            ),
        ),
        (e.data.is_not(None), func.jsonb_build_object("data", e.data)),
        else_=cast(literal("{}"), JSONB),
    )
    # Extensions first, so no extension can shadow an attribute the store sets.
    return e.extensions.op("||")(envelope).op("||")(payload)


def compact_json(text: str) -> str:
    """``jsonb``'s text without the spaces PostgreSQL puts after ``,`` and ``:``, as every
    other answer is written. Numbers are left as PostgreSQL wrote them (a round trip
    through Python floats would change digits); only what lies outside strings changes,
    and a quote inside a string is escaped (``\\"``), so ``"`` splits the text into what is
    outside strings and what is inside."""
    parts = text.split('"')
    outside = True
    for index, part in enumerate(parts):
        if outside:
            parts[index] = part.replace(" ", "")
            outside = False
        elif (len(part) - len(part.rstrip("\\"))) % 2 == 0:  # an unescaped quote ends it
            outside = True
    return '"'.join(parts)


def _json_text() -> ColumnElement[str]:
    return cast(_structured(), Text).label("json")


def structured_json() -> ColumnElement[str]:
    """An event's structured CloudEvent JSON as a column for other readers of the log
    (the relay): PostgreSQL's text of it, which ``compact_json`` makes what ``GET
    /events/{id}`` answers."""
    return _json_text()


# Built once: constructing the envelope expression costs more than running the query.
# On the driver: every lease reads its task's trigger with it.
_READ_EVENT = DriverStatement.of(
    select(_json_text()).where(
        events.c.tenant == bindparam("tenant"), events.c.id == bindparam("event_id")
    )
)


_READ_EVENTS = DriverStatement.of(
    select(events.c.id, _json_text()).where(
        events.c.tenant == bindparam("tenant"),
        events.c.id == any_(bindparam("event_ids", type_=ARRAY(Text))),
    )
)


class EventReader:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def read_event(self, tenant: str, event_id: str) -> str | None:
        """The event as compact structured CloudEvent JSON text, or None when not in
        ``tenant``."""
        row = await _READ_EVENT.first(self._conn, tenant=tenant, event_id=event_id)
        return None if row is None else compact_json(row[0])

    async def read_events(self, tenant: str, event_ids: list[str]) -> dict[str, str]:
        """The events of ``event_ids`` stored in ``tenant``, each as structured CloudEvent
        JSON text, by id (one statement for them all)."""
        found = await _READ_EVENTS.rows(self._conn, tenant=tenant, event_ids=event_ids)
        return {row[0]: row[1] for row in found}

    async def read_stream(
        self, tenant: str, stream: str, *, from_version: int, limit: int
    ) -> StreamPage:
        """A page of ``stream`` from ``from_version``: up to ``limit`` events, each as
        compact structured CloudEvent JSON text, but no more than about ``PAGE_BYTES``
        (one event at least), read from a named cursor; and the version the next page
        starts at, when more follow."""
        statement = (
            select(events.c.stream_version, _json_text(), events.c.position)
            .where(
                events.c.tenant == tenant,
                events.c.stream == stream,
                events.c.stream_version >= from_version,
            )
            .order_by(events.c.stream_version)
            .limit(limit + 1)  # the one past the page tells that more follow
        )
        page: list[str] = []
        size = 0
        fetches = self._stream(statement, min(limit + 1, 1000), _second_bytes)
        async with aclosing(fetches):  # closes the cursor on an early return (``_stream``)
            async for rows in fetches:
                for version, text, position in rows:
                    if len(page) == limit or (page and size >= PAGE_BYTES):
                        return StreamPage(page, int(version), int(position))
                    page.append(compact_json(text))
                    size += _utf8_bytes(page[-1])
        return StreamPage(page, None)

    async def has_stream(self, tenant: str, stream: str) -> bool:
        statement = select(
            select(events.c.position)
            .where(events.c.tenant == tenant, events.c.stream == stream)
            .exists()
        )
        return bool((await self._conn.execute(statement)).scalar())

    async def replay(
        self, tenant: str, selection: EventFilter, *, fetch_rows: int
    ) -> AsyncGenerator[ReplayChunk]:
        """Matching events in position order, ``fetch_rows`` at a time, as NDJSON chunks.

        A named (server-side) cursor streams the rows, so memory stays flat whatever
        the store's size. It runs on the driver connection under SQLAlchemy: PostgreSQL
        renders each line, and building a Row object per line cost a third of the rate.
        """
        statement = apply_filter(select(_json_text()), tenant, selection)
        fetches = self._stream(statement, fetch_rows, _line_bytes)
        async with aclosing(fetches):
            async for rows in fetches:
                yield ReplayChunk("\n".join(row[0] for row in rows) + "\n", len(rows))

    async def replay_rows(
        self, tenant: str, selection: EventFilter, *, fetch_rows: int
    ) -> AsyncGenerator[list[tuple[Any, ...]]]:
        """Matching events in position order, ``fetch_rows`` at a time, as tuples of
        ``parquet.SCHEMA``'s columns."""
        statement = apply_filter(select(*_COLUMNS), tenant, selection)
        fetches = self._stream(statement, fetch_rows, _column_bytes)
        async with aclosing(fetches):
            async for rows in fetches:
                yield rows

    async def _stream(
        self,
        statement: Select[Any],
        fetch_rows: int,
        measure: Callable[[list[tuple[Any, ...]]], int],
    ) -> AsyncGenerator[list[tuple[Any, ...]]]:
        """The rows of ``statement`` from a named cursor, ``fetch_rows`` at a time at
        most, and about ``FETCH_BYTES`` (as ``measure`` counts them): a fetch of 1,000
        events of a megabyte each held a gigabyte. Each fetch is sized by the rows of the
        one before; the first takes ``FIRST_FETCH_ROWS``. Its callers close it as they stop
        (``aclosing``), so that the cursor is closed then, not by a finaliser that may run
        once the connection serves another request."""
        compiled = statement.compile(
            dialect=self._conn.dialect, compile_kwargs={"render_postcompile": True}
        )
        driver = await driver_of(self._conn)
        size = min(fetch_rows, FIRST_FETCH_ROWS)
        query = str(compiled), compiled.params
        async with server_cursor(driver, "causeway_replay", *query, named_rows=False) as cursor:
            while rows := await cursor.fetchmany(size):
                yield rows
                per_row = max(measure(rows) / len(rows), 1.0)
                size = max(1, min(fetch_rows, int(FETCH_BYTES / per_row)))


FIRST_FETCH_ROWS = 100
FETCH_BYTES = 8 << 20
PAGE_BYTES = 8 << 20  # a stream page ends once it holds this much (README)


@dataclass(frozen=True, slots=True)
class StreamPage:
    events: list[str]  # compact structured CloudEvent JSON, in version order
    next_version: int | None  # where the next page starts; None: this is the last
    next_position: int | None = None  # the log position of the event it starts with


def _second_bytes(rows: list[tuple[Any, ...]]) -> int:
    return sum(_utf8_bytes(row[1]) for row in rows)


def _utf8_bytes(text: str) -> int:
    """What ``text`` takes in UTF-8 (up to four bytes a character, one for ASCII)."""
    return len(text) if text.isascii() else len(text.encode())


def _line_bytes(rows: list[tuple[Any, ...]]) -> int:
    return sum(_utf8_bytes(row[0]) for row in rows)


def _column_bytes(rows: list[tuple[Any, ...]]) -> int:
    """About what the rows of ``_COLUMNS`` hold: their data, and a few hundred bytes of
    attributes each."""
    return sum(_utf8_bytes(row[_DATA] or "") + len(row[_DATA_BINARY] or b"") + 512 for row in rows)


_e = events.c
# The columns of a Parquet replay, in the order of ``app.store.parquet.SCHEMA``.
_COLUMNS = (
    _e.position,
    _e.id,
    _e.source,
    _e.type,
    _e.subject,
    _e.time,
    _e.time_rfc3339,
    _e.recorded_at,
    _e.stream,
    _e.stream_version,
    _e.datacontenttype,
    _e.dataschema,
    cast(_e.data, Text),
    _e.data_binary,
    cast(_e.extensions, Text),
    _e.causes,
    _e.correlation_id,
    _e.model_name,
    _e.model_version,
    _e.model_signature,
    _e.prev_hash,
    _e.hash,
)
_DATA, _DATA_BINARY = 12, 13  # where _COLUMNS has them


@dataclass(frozen=True, slots=True)
class ReplayChunk:
    text: str  # NDJSON: ``count`` lines, each ending in a newline
    count: int


def _model_filter_only(selection: EventFilter) -> bool:
    """Whether ``selection`` names a model, and no type of the store's own."""
    names_model = selection.model_name is not None or selection.model_version is not None
    own_types = any(t.startswith(RESERVED_TYPE_PREFIX) for t in selection.types or ())
    return names_model and not own_types


def apply_filter(statement: Select[Any], tenant: str, selection: EventFilter) -> Select[Any]:
    """``statement`` narrowed to ``selection`` within ``tenant``, in position order."""
    e = events.c
    statement = statement.where(e.tenant == tenant, e.position > selection.after)
    if selection.types:
        statement = statement.where(e.type.in_(selection.types))
    if selection.stream is not None:
        statement = statement.where(e.stream == selection.stream)
    if selection.source is not None:
        statement = statement.where(e.source == selection.source)
    if selection.correlation_id is not None:
        statement = statement.where(e.correlation_id == selection.correlation_id)
    if selection.model_name is not None:
        statement = statement.where(e.model_name == selection.model_name)
    if selection.model_version is not None:
        statement = statement.where(e.model_version == selection.model_version)
    if _model_filter_only(selection):
        # What the model produced: the store's own events that name it (its registration,
        # aliases, training runs, rollouts) only when ``types`` asks for them.
        statement = statement.where(~e.type.startswith(RESERVED_TYPE_PREFIX, autoescape=True))
    if selection.position_to is not None:
        statement = statement.where(e.position <= selection.position_to)
    if selection.from_version is not None:
        statement = statement.where(e.stream_version >= selection.from_version)
    if selection.since is not None:
        statement = statement.where(e.time >= selection.since)
    if selection.until is not None:
        statement = statement.where(e.time < selection.until)
    statement = statement.order_by(e.position)
    if selection.limit is not None:
        statement = statement.limit(selection.limit)
    return statement
