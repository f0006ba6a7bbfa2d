"""``POST /events``: the CloudEvents HTTP endpoint (structured, batch and binary mode).

Answers 201 when anything was appended, 200 when every event was already stored (an
exact re-send), with one entry per event in request order.
"""

# No `from __future__ import annotations`: FastAPI must see the Depends() built in
# create_router, which a string annotation could not resolve.

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel

from app.errors import PayloadTooLarge
from app.store.keys import Principal
from ingest.appender import Appender
from ingest.binding import parse_request
from ingest.limits import Limits


class AppendedEvent(BaseModel):
    id: str
    source: str
    stream: str
    stream_version: int
    position: int
    duplicate: bool


class AppendResponse(BaseModel):
    events: list[AppendedEvent]


async def read_body(request: Request, max_bytes: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(int(declared), max_bytes)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise _too_large(len(body), max_bytes, at_least=True)
    return bytes(body)


def _too_large(size: int, limit: int, *, at_least: bool = False) -> PayloadTooLarge:
    over = "at least " if at_least else ""
    return PayloadTooLarge(
        f"the request body is {over}{size} bytes, over the {limit}-byte limit by {over}"
        f"{size - limit}",
        limit="max_request_bytes",
        max_bytes=limit,
    )


def create_router(
    appender: Appender,
    limits: Limits,
    ingest_principal: Callable[..., Coroutine[Any, Any, Principal]],
) -> APIRouter:
    router = APIRouter(tags=["ingest"])

    @router.post(
        "/events",
        status_code=201,
        response_model=AppendResponse,
        responses={200: {"model": AppendResponse, "description": "every event was a re-send"}},
        summary="Append CloudEvents (structured, batch or binary mode)",
    )
    async def post_events(
        request: Request, principal: Annotated[Principal, Depends(ingest_principal)]
    ) -> Response:
        body = await read_body(request, limits.max_request_bytes)
        events = parse_request(
            request.headers.get("content-type"), request.scope["headers"], body, limits
        )
        appended = await appender.append(principal.tenant, events, size_bytes=len(body))
        # Built directly (AppendResponse documents the shape): a model per event would
        # cost more than planning the event did.
        answer = {
            "events": [
                {
                    "id": a.id,
                    "source": a.source,
                    "stream": a.stream,
                    "stream_version": a.stream_version,
                    "position": a.position,
                    "duplicate": a.duplicate,
                }
                for a in appended
            ]
        }
        status = 201 if any(not a.duplicate for a in appended) else 200
        return Response(orjson.dumps(answer), status_code=status, media_type="application/json")

    return router
