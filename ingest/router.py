"""``POST /events``: the CloudEvents HTTP endpoint (structured, batch and binary mode).

Answers 201 when anything was appended, 200 when every event was already stored (an
exact re-send), with one entry per event in request order.
"""

# No `from __future__ import annotations`: FastAPI must see the Depends() built in
# create_router, which a string annotation could not resolve.

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.types import Receive

from app.store.append.group_commit import Appender
from app.store.keys import Principal
from app.store.records import Appended, NewEvent
from app.web.bodies import receive_body
from ingest.binding import parse_in_parts
from ingest.limits import Limits

POSITION_HEADER = "Causeway-Position"  # as app.web.reads names it (ingest imports no web)


class AppendedEvent(BaseModel):
    id: str
    source: str
    stream: str
    stream_version: int
    position: int
    duplicate: bool


class AppendResponse(BaseModel):
    events: list[AppendedEvent]


class Ingest:
    """What ``POST /events`` does once the caller is known: parse the body, append, and
    answer with the status and the JSON body. The route below and the app's own path at
    the root (``app.main.Causeway``) both call it, so they cannot differ."""

    def __init__(self, appender: Appender, limits: Limits) -> None:
        self._appender = appender
        self.limits = limits

    async def answer(
        self,
        principal: Principal,
        content_type: str | None,
        headers: Sequence[tuple[bytes, bytes]],
        body: bytes,
    ) -> tuple[int, bytes, int]:
        """The status, the JSON body, and the position to answer in ``Causeway-Position``."""
        events: list[NewEvent] = []
        for number, part in enumerate(parse_in_parts(content_type, headers, body, self.limits)):
            if number:
                await asyncio.sleep(0)  # other tasks (a group holding the log head) go on
            events += part
        appended = await self._appender.append(principal.tenant, events, size_bytes=len(body))
        return answer_of(appended)

    async def read_body(self, receive: Receive, declared: str | None) -> bytes:
        return await receive_body(receive, declared, self.limits.max_request_bytes)


def answer_of(appended: list[Appended]) -> tuple[int, bytes, int]:
    """The status and JSON body that answer an append: 201 when anything was appended,
    200 when every event was stored before; and the highest position of its events (0
    for none), the read-your-writes token: a read that names it shows them all."""
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
    position = max([a.position for a in appended], default=0)
    return status, orjson.dumps(answer), position


def create_router(
    ingest: Ingest, ingest_principal: Callable[..., Coroutine[Any, Any, Principal]]
) -> APIRouter:
    """The documented route. A request reaches it when the app is served under a path
    prefix; at the root, ``app.main.Causeway`` answers before routing (same ``Ingest``)."""
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
        body = await ingest.read_body(request.receive, request.headers.get("content-length"))
        status, answer, position = await ingest.answer(
            principal, request.headers.get("content-type"), request.scope["headers"], body
        )
        return Response(
            answer,
            status_code=status,
            media_type="application/json",
            headers={POSITION_HEADER: str(position)},
        )

    return router
