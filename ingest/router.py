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

from app.errors import (
    EventTooLarge,
    IdConflict,
    InvalidCloudEvent,
    InvalidEvent,
    ReservedType,
    TimeInFuture,
    UnknownCause,
    UnsupportedMediaType,
    VersionConflict,
)
from app.store.append.group_commit import Appender
from app.store.keys import Principal
from app.store.records import Appended, NewEvent
from app.telemetry import tracing
from app.web.bodies import receive_body
from app.web.openapi import CLOUDEVENT_REF, JSON_VALUE_REF, answers
from ingest.attributes import RESERVED_ID_PREFIXES, SET_BY_STORE
from ingest.binding import parse_in_parts
from ingest.limits import Limits
from ingest.traced import traced_append

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


# The JSON format of one event, as ``ingest.attributes`` checks it: what the OpenAPI
# document says of the body of ``POST /events`` (binary mode is told in its description).
# An attribute's text holds no control character and no Unicode noncharacter (those of
# the planes past the first are left out here: a pattern's \\u escapes name one unit).
_NONCHARACTERS = "\\ufdd0-\\ufdef\\ufffe\\uffff"
_PRINTABLE = f"[^\\x00-\\x1f\\x7f-\\x9f{_NONCHARACTERS}]"
_TEXT = {"type": "string", "pattern": f"^{_PRINTABLE}*$"}
_NULL = {"type": "null"}
# A URI's character: neither whitespace (str.isspace) nor a control character.
_URI_CHAR = (
    "[^\\x00-\\x20\\x7f-\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
    f"{_NONCHARACTERS}]"
)
# A URI-reference's: nor one of the characters RFC 3986 leaves out of every URI.
_SOURCE_CHAR = _URI_CHAR.replace("]", '<>"{}|\\\\^`]')
_ID_END = _URI_CHAR.replace("]", ",]")  # nor a comma
_MEDIA = "[!#$%&'*+.^_`|~0-9A-Za-z-]+"  # a media type's type or subtype  # an attribute that is null is left out
_SOME_TEXT = {"anyOf": [{"type": "string", "pattern": f"^{_PRINTABLE}+$"}, _NULL]}
_RESERVED = "|".join(RESERVED_ID_PREFIXES)  # no regex metacharacter in them
_NOT_RESERVED = {"anyOf": [{"type": "string", "pattern": f"^(?!{_RESERVED}){_PRINTABLE}+$"}, _NULL]}
_ID_CHAR = _PRINTABLE.replace("]", ",]")  # an id names no comma: causationid lists ids with them
_CAUSE = f"{_ID_CHAR}*{_ID_END}{_ID_CHAR}*"  # one id of a causationid: stripped, not empty
CLOUDEVENT_SCHEMA: dict[str, Any] = {
    "title": "CloudEvent",
    "type": "object",
    "required": ["specversion", "id", "source", "type"],
    "properties": {
        "specversion": {"const": "1.0"},
        "id": {
            "type": "string",
            "pattern": f"^(?!{_RESERVED}){_ID_END}(?:{_ID_CHAR}*{_ID_END})?$",
            "description": "unique in the tenant; no comma, no whitespace at either end",
        },
        "source": {
            "type": "string",
            "pattern": f"^{_SOURCE_CHAR}+$",
            "description": "a URI-reference",
        },
        "type": {"type": "string", "pattern": f"^(?!causeway\\.){_PRINTABLE}+$"},
        "subject": _SOME_TEXT,
        "time": {"anyOf": [{"type": "string", "format": "date-time"}, _NULL]},
        "data": {**JSON_VALUE_REF, "description": "JSON, nesting 128 levels at most"},
        "data_base64": {"anyOf": [{"type": "string", "contentEncoding": "base64"}, _NULL]},
        "datacontenttype": {
            "anyOf": [
                {"type": "string", "pattern": f"^{_MEDIA}/{_MEDIA} *(?:;{_PRINTABLE}*)?$"},
                _NULL,
            ]
        },
        "dataschema": {
            "anyOf": [
                {
                    "type": "string",
                    "pattern": f"^[A-Za-z][A-Za-z0-9+.\\-]*:{_URI_CHAR}*$",
                },
                _NULL,
            ],
            "description": "an absolute URI",
        },
        "stream": {**_NOT_RESERVED, "description": "the stream (default: subject, else source)"},
        "expectedversion": {
            "anyOf": [{"type": "integer", "minimum": 0, "maximum": 2**31 - 1}, _NULL]
        },
        "causationid": {
            "anyOf": [{"type": "string", "pattern": f"^{_CAUSE}(?:,{_CAUSE})*$"}, _NULL],
            "description": "the ids of the stored events it derives from, comma-separated",
        },
        "correlationid": _SOME_TEXT,
        "modelname": _SOME_TEXT,
        "modelversion": _SOME_TEXT,
        "modelsig": _SOME_TEXT,
    },
    # A model is named by modelname and modelversion together (a null one is left out).
    "allOf": [
        {
            "if": {"required": [given], "properties": {given: {"type": "string"}}},
            "then": {
                "required": needed,
                "properties": {name: {"type": "string"} for name in needed},
            },
        }
        for given, needed in (
            ("modelname", ["modelversion"]),
            ("modelversion", ["modelname"]),
            ("modelsig", ["modelname", "modelversion"]),
        )
    ],
    # data and data_base64 are not both given (a null data_base64 is left out)
    "not": {"required": ["data", "data_base64"], "properties": {"data_base64": {"type": "string"}}},
    "propertyNames": {"pattern": "^[a-z0-9]+$", "not": {"enum": sorted(SET_BY_STORE)}},
    "additionalProperties": {
        "anyOf": [
            _TEXT,
            {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1},
            {"type": "boolean"},
            _NULL,
        ]
    },
    "description": (
        "A CloudEvent in the JSON format. Extensions (lower-case letters and digits) are "
        "text, 32-bit integers or booleans; Causeway's own: causationid, correlationid, "
        "modelname and modelversion (a registered version) with modelsig, stream, "
        "expectedversion."
    ),
}
_EVENTS_BODY = {
    "required": True,
    "description": (
        "Structured mode: one event (application/cloudevents+json). Batch mode: a list of "
        "them, appended together or not at all (application/cloudevents-batch+json). "
        "Binary mode, not listed here: the attributes in ce-* headers, the data as the body "
        "with its own Content-Type."
    ),
    "content": {
        "application/cloudevents+json": {"schema": CLOUDEVENT_REF},
        "application/cloudevents-batch+json": {
            "schema": {"type": "array", "items": CLOUDEVENT_REF}
        },
    },
}


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
        if tracing.on:  # a span per event, linked to its causes (ingest.traced)
            appended = await traced_append(self._appender, principal.tenant, events, len(body))
        else:
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
        responses={
            200: {"model": AppendResponse, "description": "every event was a re-send"},
            **answers(
                InvalidCloudEvent,
                IdConflict,
                VersionConflict,
                UnsupportedMediaType,
                InvalidEvent,
                UnknownCause,
                ReservedType,
                EventTooLarge,
                TimeInFuture,
            ),
        },
        summary="Append CloudEvents (structured, batch or binary mode)",
        openapi_extra={"requestBody": _EVENTS_BODY},
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
