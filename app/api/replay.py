"""``GET /replay``: a filtered stream of events as NDJSON, or as a Parquet file
(``format=parquet``), in position order.

Rows come from a server-side cursor and go out as they arrive (Parquet: a row group at a
time), so memory stays flat whatever the size of the store. ``after`` resumes after the
last position a client saw.

A replay holds a pooled connection for as long as its client takes to read, so a process
serves ``replay_max_streams`` at once (``ReplaySlots``) and answers more with a 503: slow
readers never take the pool every other request needs. A reader that stops reading
altogether loses its connection after ``send_timeout_s`` (``app.web.timeouts``), and its
replay ends as if it had left. The connection is taken, and the
first rows read, before the response begins, so that a replay that cannot start is a
problem (503, 500), never a 200 with a broken body.

A replay can run for hours, so its key is asked again before each fetch after the first
(as every request asks it: within ``CAUSEWAY_KEY_CACHE_TTL_S`` of a revocation): once
the key is revoked, the replay is cut off there, its connection closed without the end
of the body, so that its client sees a replay cut short, never one that reached the end.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import StringConstraints
from starlette.types import Receive, Send
from starlette.types import Scope as ASGIScope

from app.db.engine import Connector
from app.db.tenancy import TenantReadsChosenLater
from app.errors import BadRequest, Unavailable
from app.settings import Settings
from app.store.keys import Principal, Scope
from app.store.reads import EventReader
from app.store.records import MAX_POSITION, EventFilter, refuse_empty_filters
from app.store.timestamps import parse_time_parameter
from app.telemetry import metrics
from app.web.dependencies import (
    PLAIN_DIGITS,
    log_reads,
    require,
    settings_of,
    still_authorized,
)
from app.web.openapi import TIME_FORMAT
from app.web.timeouts import SendTimedOut

T = TypeVar("T")
_END: Any = object()
logger = logging.getLogger(__name__)
# Whether the replay's key may still read (asked before each fetch after the first).
StillAllowed = Callable[[], Awaitable[bool]]
NDJSON = "application/x-ndjson"
PARQUET = "application/vnd.apache.parquet"
# What one send() of a replay carries at most: about what the server's transport buffers
# before it waits for the client.
SEND_SLICE_BYTES = 64 << 10
router = APIRouter(tags=["replay"])


def replay_filter(
    after: int,
    types: str | None,
    stream: str | None,
    source: str | None,
    correlationid: str | None,
    modelname: str | None,
    modelversion: str | None,
    since: str | None,
    until: str | None,
    limit: int | None,
) -> EventFilter:
    """The filter a replay's parameters name (HTTP and CLI take the same ones)."""
    texts = (types, stream, source, correlationid, modelname, modelversion)
    if any(text is not None and "\x00" in text for text in texts):
        # Checked here, not left to PostgreSQL: a replay's response has begun by then.
        raise BadRequest("parameters cannot contain a NUL character")
    selected_types = split_types(types)
    refuse_empty_filters(
        {
            "types": None if types is None else selected_types,
            "stream": stream,
            "source": source,
            "correlationid": correlationid,
            "modelname": modelname,
            "modelversion": modelversion,
        },
        named_as="parameter",
    )
    return EventFilter(
        after=after,
        types=selected_types,
        stream=stream,
        source=source,
        correlation_id=correlationid,
        model_name=modelname,
        model_version=modelversion,
        since=parse_time_parameter("since", since),
        until=parse_time_parameter("until", until),
        limit=limit,
    )


class ReplaySlots:
    """How many replays this process streams at once; each holds a connection."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.taken = 0

    def take(self) -> None:
        if self.taken >= self.slots:
            raise Unavailable(
                f"{self.slots} replays are streaming already; try again shortly",
                headers={"Retry-After": "1"},
                max_streams=self.slots,
            )
        self.taken += 1
        metrics.REPLAY_STREAMS.inc()

    def give_back(self) -> None:
        self.taken -= 1
        metrics.REPLAY_STREAMS.dec()


class _KeyRevoked(Exception):
    """The replay's key can no longer read: the replay is cut off where it stands."""


class _Streamed(StreamingResponse):
    """A replay whose first part was read already, streamed to its end or until the
    client leaves; then the generators that hold its connection are closed and its slot
    given back, however the response ends.

    Starlette's own streaming cancels the body's generator where it stands when the
    client leaves, often in the middle of a FETCH: psycopg's cancellation of that query
    was cancelled in turn, the connection closed under SQLAlchemy's pool, and every
    replay a client left logged an ERROR with a traceback. Here the client's leaving
    only ends the loop between two parts, and the generators close as at the end."""

    def __init__(self, content: AsyncGenerator[bytes], owned: _Owned, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._owned = owned

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:  # noqa: ARG002  (HTTP only: replay is a GET route)
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch())
        try:
            start = {"type": "http.response.start", "status": self.status_code}
            await send({**start, "headers": self.raw_headers})
            async for part in self.body_iterator:
                # In slices: the server holds a send() until the client took most of the
                # one before, and the send timeout times each send() (a fetch of 8 MB
                # timed whole cut off readers that kept reading at 140 KB/s).
                for at in range(0, len(part), SEND_SLICE_BYTES):
                    piece = part[at : at + SEND_SLICE_BYTES]
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
                    if gone.is_set():
                        return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except _KeyRevoked:
            # Returning before the body's end makes the server close the connection: the
            # client sees a cut, not a replay that reached the end of what it asked.
            logger.warning("a replay's key was revoked; closing its connection")
            return
        except (OSError, SendTimedOut):
            # How a server of ASGI 2.4 says the client is gone; or it stopped reading
            # (``Timeouts`` said so in a WARNING, and closes the connection).
            return
        finally:
            watcher.cancel()
            await self._owned.release()


class _Owned:
    """What one replay holds: its slot, and the generators that hold its connection."""

    def __init__(self, slots: ReplaySlots, *generators: AsyncGenerator[Any]) -> None:
        self._slots = slots
        self._generators = list(generators)

    def add(self, generator: AsyncGenerator[Any]) -> None:
        self._generators.insert(0, generator)  # the outermost is closed first

    async def release(self) -> None:
        try:
            for generator in self._generators:
                await generator.aclose()
        finally:
            self._slots.give_back()


async def _primed(source: AsyncGenerator[T]) -> tuple[bool, AsyncGenerator[T]]:
    """``source`` with its first item read now (a connection taken, a cursor opened,
    rows fetched), so that failing to start fails the caller, not a response; and
    whether it has any item at all."""
    first = await anext(source, _END)

    async def rest() -> AsyncGenerator[T]:
        if first is _END:
            return
        yield first
        async for item in source:
            yield item

    return first is not _END, rest()


async def _started(
    body: AsyncGenerator[bytes], owned: _Owned, media_type: str, **kwargs: Any
) -> Response:
    """The response for ``body``, once its first part is read: what fails before that is
    the request's error (a problem), not a 200 with a broken body."""
    try:
        any_part, content = await _primed(body)
    except BaseException:
        await owned.release()
        raise
    if not any_part:
        await owned.release()
        return Response(b"", media_type=media_type, **kwargs)
    owned.add(content)
    return _Streamed(content, owned, media_type=media_type, **kwargs)


def split_types(text: str | None) -> tuple[str, ...]:
    """The types ``text`` names (comma-separated, each trimmed), each once, in order."""
    return tuple(dict.fromkeys(t.strip() for t in (text or "").split(",") if t.strip()))


async def ndjson_lines(
    engine: Connector,
    tenant: str,
    selection: EventFilter,
    fetch_rows: int,
    still_allowed: StillAllowed,
) -> AsyncGenerator[bytes]:
    async with engine.connect() as conn:
        # Closed before the connection goes back (a reader gone), not by a finaliser later.
        chunks = EventReader(conn).replay(tenant, selection, fetch_rows=fetch_rows)
        async with aclosing(chunks):
            async for chunk in chunks:
                yield chunk.text.encode()
                if not await still_allowed():  # before the next fetch
                    raise _KeyRevoked


async def row_chunks(
    engine: Connector,
    tenant: str,
    selection: EventFilter,
    fetch_rows: int,
    still_allowed: StillAllowed,
) -> AsyncGenerator[list[tuple[Any, ...]]]:
    async with engine.connect() as conn:
        fetched = EventReader(conn).replay_rows(tenant, selection, fetch_rows=fetch_rows)
        async with aclosing(fetched):  # as ndjson_lines
            async for rows in fetched:
                yield rows
                if not await still_allowed():
                    raise _KeyRevoked


# A filter names something stored, which is never empty and holds no U+0000 (ingest
# refuses both); each ``types`` parameter names at least one type.
_Filter = Annotated[str | None, Query(pattern=r"^[^\x00]+$")]
# What /replay takes (min_position from log_reads): a name it does not know is refused, as
# a filter named as elsewhere (``correlation_id``, ``correlationId``, ``type``) would
# otherwise be ignored and the whole log answered as the filtered part of it.
# tests/integration/app/api/test_replay_parameters.py checks the OpenAPI document lists these.
REPLAY_PARAMETERS = frozenset(
    {"after", "types", "stream", "source", "correlationid", "modelname", "modelversion",
     "since", "until", "limit", "format", "min_position"}
)  # fmt: skip
# (\x1c-\x1f: not ``\s`` to the pattern, but whitespace to ``str.strip``, which trims them.)
_SOME_TYPE = r"^[^\x00]*[^\x00\s\x1c-\x1f,][^\x00]*$"


@router.get(
    "/replay",
    summary="Replay events as NDJSON (one structured CloudEvent a line) or as Parquet",
    response_class=StreamingResponse,
    responses={200: {"content": {NDJSON: {}, PARQUET: {}}}},
)
async def replay(
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.READ))],
    engine: Annotated[TenantReadsChosenLater, Depends(log_reads)],
    settings: Annotated[Settings, Depends(settings_of)],
    after: Annotated[
        int,
        Query(ge=0, le=MAX_POSITION, description="resume after this position"),
        PLAIN_DIGITS,
    ] = 0,
    types: Annotated[
        list[Annotated[str, StringConstraints(pattern=_SOME_TYPE)]] | None,
        Query(description="event types: comma-separated, or the parameter repeated"),
    ] = None,
    stream: _Filter = None,
    source: _Filter = None,
    correlationid: _Filter = None,
    modelname: _Filter = None,
    modelversion: _Filter = None,
    since: Annotated[
        str | None, Query(description="event time >= (RFC 3339)", json_schema_extra=TIME_FORMAT)
    ] = None,
    until: Annotated[
        str | None, Query(description="event time < (RFC 3339)", json_schema_extra=TIME_FORMAT)
    ] = None,
    limit: Annotated[int | None, Query(ge=1, le=MAX_POSITION), PLAIN_DIGITS] = None,
    format: Annotated[
        Literal["ndjson", "parquet"],
        Query(description="ndjson: a structured CloudEvent a line; parquet: a column each"),
    ] = "ndjson",
) -> Response:
    unknown = sorted(set(request.query_params) - REPLAY_PARAMETERS)
    if unknown:
        raise BadRequest(
            f"/replay takes no parameter {unknown[0]!r}; it takes "
            + ", ".join(sorted(REPLAY_PARAMETERS)),
            parameter=unknown[0],
        )
    selection = replay_filter(
        after,
        None if types is None else ",".join(types),
        stream, source, correlationid, modelname, modelversion, since, until, limit,
    )  # fmt: skip
    await engine.choose()  # a position named is waited for holding no slot
    slots: ReplaySlots = request.app.state.replay_slots
    slots.take()
    fetch_rows = settings.replay_fetch_rows

    async def still_allowed() -> bool:
        return await still_authorized(request, Scope.READ)

    if format == "parquet":
        # Imported on first use: pyarrow adds 40 MB and half a second to every process
        # that loads it, and most never write Parquet.
        from app.store.parquet import parquet_file

        rows = row_chunks(engine, principal.tenant, selection, fetch_rows, still_allowed)
        try:
            _, chunks = await _primed(rows)  # the file's header needs no rows: read some first
        except BaseException:
            slots.give_back()
            raise
        body = parquet_file(chunks)
        return await _started(
            body,
            _Owned(slots, body, chunks, rows),
            PARQUET,
            headers={"Content-Disposition": 'attachment; filename="replay.parquet"'},
        )
    lines = ndjson_lines(engine, principal.tenant, selection, fetch_rows, still_allowed)
    return await _started(lines, _Owned(slots, lines), NDJSON)
