"""``GET /replay``: a filtered stream of events as NDJSON, or as a Parquet file
(``format=parquet``), in position order.

Rows come from a server-side cursor and go out as they arrive (Parquet: a row group at a
time), so memory stays flat whatever the size of the store. ``after`` resumes after the
last position a client saw.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.deps import engine_of, require, settings_of
from app.errors import BadRequest
from app.settings import Settings
from app.store.keys import Principal, Scope
from app.store.reads import EventReader
from app.store.records import MAX_POSITION, EventFilter
from app.store.timestamps import parse_time_parameter

NDJSON = "application/x-ndjson"
PARQUET = "application/vnd.apache.parquet"
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
    return EventFilter(
        after=after,
        types=split_types(types),
        stream=stream,
        source=source,
        correlation_id=correlationid,
        model_name=modelname,
        model_version=modelversion,
        since=parse_time_parameter("since", since),
        until=parse_time_parameter("until", until),
        limit=limit,
    )


def split_types(text: str | None) -> tuple[str, ...]:
    return tuple(t.strip() for t in (text or "").split(",") if t.strip())


async def ndjson_lines(
    engine: AsyncEngine, tenant: str, selection: EventFilter, fetch_rows: int
) -> AsyncIterator[bytes]:
    async with engine.connect() as conn:
        async for chunk in EventReader(conn).replay(tenant, selection, fetch_rows=fetch_rows):
            yield chunk.text.encode()


async def row_chunks(
    engine: AsyncEngine, tenant: str, selection: EventFilter, fetch_rows: int
) -> AsyncIterator[list[tuple[Any, ...]]]:
    async with engine.connect() as conn:
        async for rows in EventReader(conn).replay_rows(tenant, selection, fetch_rows=fetch_rows):
            yield rows


@router.get(
    "/replay",
    summary="Replay events as NDJSON (one structured CloudEvent a line) or as Parquet",
    response_class=StreamingResponse,
    responses={200: {"content": {NDJSON: {}, PARQUET: {}}}},
)
async def replay(
    principal: Annotated[Principal, Depends(require(Scope.READ))],
    engine: Annotated[AsyncEngine, Depends(engine_of)],
    settings: Annotated[Settings, Depends(settings_of)],
    after: Annotated[
        int, Query(ge=0, le=MAX_POSITION, description="resume after this position")
    ] = 0,
    types: Annotated[str | None, Query(description="comma-separated event types")] = None,
    stream: str | None = None,
    source: str | None = None,
    correlationid: str | None = None,
    modelname: str | None = None,
    modelversion: str | None = None,
    since: Annotated[str | None, Query(description="event time >= (RFC 3339)")] = None,
    until: Annotated[str | None, Query(description="event time < (RFC 3339)")] = None,
    limit: Annotated[int | None, Query(ge=1, le=MAX_POSITION)] = None,
    format: Annotated[
        Literal["ndjson", "parquet"],
        Query(description="ndjson: a structured CloudEvent a line; parquet: a column each"),
    ] = "ndjson",
) -> StreamingResponse:
    selection = replay_filter(
        after, types, stream, source, correlationid, modelname, modelversion, since, until, limit
    )
    if format == "parquet":
        # Imported on first use: pyarrow adds 40 MB and half a second to every process
        # that loads it, and most never write Parquet.
        from app.store.parquet import parquet_file

        return StreamingResponse(
            parquet_file(
                row_chunks(engine, principal.tenant, selection, settings.replay_fetch_rows)
            ),
            media_type=PARQUET,
            headers={"Content-Disposition": 'attachment; filename="replay.parquet"'},
        )
    return StreamingResponse(
        ndjson_lines(engine, principal.tenant, selection, settings.replay_fetch_rows),
        media_type=NDJSON,
    )
