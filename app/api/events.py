"""Reads of stored events: one by id, and one stream in version order."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from app.db.engine import Connector
from app.errors import NotFound
from app.store.keys import Principal, Scope
from app.store.reads import EventReader
from app.store.records import MAX_POSITION
from app.web.dependencies import PLAIN_DIGITS, log_reads, require
from app.web.openapi import StoredText, answers
from app.web.reads import MIN_POSITION_HEADER, MIN_POSITION_PARAMETER, parse_min_position

router = APIRouter(tags=["events"])
_read = require(Scope.READ)


@router.get(
    "/events/{event_id:path}",
    summary="One stored event as structured CloudEvent JSON",
    response_class=Response,
    responses={
        200: {"content": {"application/cloudevents+json": {"schema": {"type": "object"}}}},
        **answers(NotFound),
    },
)
async def read_event(
    event_id: StoredText,
    principal: Annotated[Principal, Depends(_read)],
    engine: Annotated[Connector, Depends(log_reads)],
) -> Response:
    async with engine.connect() as conn:
        found = await EventReader(conn).read_event(principal.tenant, event_id)
    if found is None:
        raise NotFound(f"no event with id {event_id!r}", id=event_id)
    return Response(found, media_type="application/cloudevents+json")


@router.get(
    "/streams/{stream:path}",
    summary="The events of one stream, in version order",
    response_class=Response,
    responses={
        200: {
            "content": {"application/cloudevents-batch+json": {"schema": {"type": "array"}}},
            "headers": {
                "Link": {
                    "description": 'when more events follow: <the next page>; rel="next"',
                    "schema": {"type": "string"},
                }
            },
        },
        **answers(NotFound),
    },
)
async def read_stream(
    stream: StoredText,
    request: Request,
    principal: Annotated[Principal, Depends(_read)],
    engine: Annotated[Connector, Depends(log_reads)],
    from_version: Annotated[int, Query(ge=1, le=MAX_POSITION), PLAIN_DIGITS] = 1,
    limit: Annotated[int, Query(ge=1, le=10_000), PLAIN_DIGITS] = 1000,
) -> Response:
    async with engine.connect() as conn:
        reader = EventReader(conn)
        page = await reader.read_stream(
            principal.tenant, stream, from_version=from_version, limit=limit
        )
        if not page.events and not await reader.has_stream(principal.tenant, stream):
            raise NotFound(f"no stream {stream!r}", stream=stream)
    headers = {}
    if page.next_version is not None:  # RFC 8288: where the next page is
        link = _next_page(request, stream, page.next_version, limit, page.next_position)
        headers["Link"] = f'<{link}>; rel="next"'
    body = "[" + ",".join(page.events) + "]"
    return Response(body, media_type="application/cloudevents-batch+json", headers=headers)


def _next_page(
    request: Request, stream: str, from_version: int, limit: int, position: int | None
) -> str:
    """The URL of the page after this one: the stream's name percent-encoded (the request's
    own path is decoded: a name with ``%``, ``>`` or characters past Latin-1 made a link
    to another stream, one no parser reads, or a header that cannot be sent), the request's
    other parameters kept, and ``min_position`` the highest of the request's (parameter
    or header) and the ``position`` of the event the next page starts with: read on a
    replica behind the one that answered this page, the link led to an empty last page,
    and the stream seemed to end short of what it announced."""
    path = f"{request.scope.get('root_path', '')}/streams/{quote(stream, safe='')}"
    url = request.url.replace(path=path)
    more: dict[str, int] = {"from_version": from_version, "limit": limit}
    if position is not None:
        given = [
            parse_min_position(request.query_params.get(MIN_POSITION_PARAMETER)),
            parse_min_position(request.headers.get(MIN_POSITION_HEADER)),
        ]
        more[MIN_POSITION_PARAMETER] = max([position, *(g for g in given if g is not None)])
    return str(url.include_query_params(**more))
