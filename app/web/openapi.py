"""The OpenAPI document, exact: every operation lists each status it answers, and every
error is an RFC 9457 problem, ``application/problem+json``, of one shared ``Problem``
schema.

A route declares the problems of its own (``responses=answers(NotFound, Conflict)``: the
statuses and descriptions come from ``app.errors``). ``finish`` adds the ones that come
from what every request of a kind goes through, whatever the route:

- every operation: 400, a path or query whose percent-encoding is not UTF-8
  (``app.main``), a parameter the route's own checks refuse;
- an operation with parameters or a body: 422, a parameter or member that is missing or
  of the wrong shape (FastAPI's validation, ``app.web.problems.on_invalid_request``);
- an operation that needs a key (its ``security``): 401, 403, and 503 (the key is looked
  up in the database, which may be unreachable or slow);
- a method that may carry a body (POST, PUT, PATCH, DELETE): 413 (``app.web.bodies``
  caps every such request, body or not), 408 (``app.web.timeouts``) and 415 (a
  Content-Encoding other than identity, ``app.main``).

And every answer's ``X-Request-Id`` header (``app.web.request_ids``).

Unexpected failures (500) are left out: an operation that answers one has a bug.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

from fastapi import Path
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from app.errors import (
    AppError,
    BadRequest,
    BodyTimeout,
    Forbidden,
    PayloadTooLarge,
    Unauthenticated,
    Unavailable,
    UnsupportedContentEncoding,
)
from app.store.model_registry import NAME_PATTERN
from app.store.records import EXACT_LIMIT, TEXT_PATTERN

PROBLEM_MEDIA_TYPE = "application/problem+json"
_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}

# The Bearer key of every operation that needs one, for the document (``security``): the
# key itself is checked by ``app.web.dependencies.authorize``, which names what is wrong.
bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearerKey",
    description="An API key made by `causeway keys create`: `Authorization: Bearer <key>`.",
)


class Problem(BaseModel):
    """An RFC 9457 problem: ``type`` is ``/problems/<code>``, which ``GET
    /problems/{code}`` explains; a problem may carry more members (``errors``, the
    limit it broke, the id it names)."""

    model_config = ConfigDict(extra="allow", title="Problem")
    type: str = Field(description="/problems/<code>: the code never changes once shipped")
    title: str
    status: int = Field(ge=400, le=599)
    detail: str


# A CloudEvent in the JSON format, as ingest reads it (POST /events, a task's results).
CLOUDEVENT_REF = {"$ref": "#/components/schemas/CloudEvent"}
# Data the store keeps: I-JSON numbers, and text PostgreSQL holds (no U+0000).
JSON_VALUE_REF = {"$ref": "#/components/schemas/JsonValue"}
_JSON_VALUE = {
    "title": "JsonValue",
    "description": "JSON whose numbers are within ±(2**53 - 1) and whose text holds no U+0000",
    "anyOf": [
        {"type": "null"},
        {"type": "boolean"},
        {"type": "string", "pattern": TEXT_PATTERN},
        {"type": "number", "minimum": -(EXACT_LIMIT - 1), "maximum": EXACT_LIMIT - 1},
        {"type": "array", "items": JSON_VALUE_REF},
        {
            "type": "object",
            "propertyNames": {"pattern": TEXT_PATTERN},
            "additionalProperties": JSON_VALUE_REF,
        },
    ],
}
_INVALID_REQUEST = (
    "Invalid request: a path, query or header parameter, or a member of the JSON body, is "
    "missing or malformed; errors names each with a JSON Pointer."
)
_BODY_METHODS = frozenset({"post", "put", "patch", "delete"})
# Every answer says its request's id (app.web.request_ids).
_REQUEST_ID_REF = {"$ref": "#/components/headers/X-Request-Id"}
_REQUEST_ID_HEADER = {
    "description": "The request's id, on each line logged for it: the client's own "
    "X-Request-Id when it is 1 to 128 of letters, digits and ._:/+=@~-, else one made here",
    "required": True,
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9._:/+=@~-]{1,128}$"},
}


def answers(*errors: type[AppError]) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route that raises ``errors``: each status once, described by
    what ``app.errors`` says of the errors that answer with it."""
    about: dict[int, list[str]] = {}
    for error in errors:
        about.setdefault(error.status, []).append(error.about)
    return {
        status: {"description": " ".join(dict.fromkeys(named))}
        for status, named in sorted(about.items())
    }


def finish(document: dict[str, Any], cloudevent: dict[str, Any]) -> dict[str, Any]:
    """``document`` (FastAPI's) with the problems every operation answers, each with the
    ``Problem`` schema as ``application/problem+json``, and the schemas routes refer to by
    ``$ref``: ``JsonValue``, and ``CloudEvent`` (``ingest``'s, given by the app)."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas["CloudEvent"] = cloudevent
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    schemas["Problem"] = Problem.model_json_schema()
    schemas["JsonValue"] = _JSON_VALUE
    document["components"].setdefault("headers", {})["X-Request-Id"] = _REQUEST_ID_HEADER
    for path_item in document.get("paths", {}).values():
        for method, operation in path_item.items():
            _complete(method, operation)
    return document


def _complete(method: str, operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    statuses: list[tuple[int, str]] = [(BadRequest.status, BadRequest.about)]
    if operation.get("parameters") or "requestBody" in operation:
        statuses.append((422, _INVALID_REQUEST))
    if operation.get("security"):
        statuses += _described(Unauthenticated, Forbidden, Unavailable)
    if method in _BODY_METHODS:
        statuses += _described(PayloadTooLarge, BodyTimeout, UnsupportedContentEncoding)
    for code, description in statuses:
        responses.setdefault(str(code), {"description": description})
    for status, response in responses.items():
        if status.isdigit() and int(status) >= 400:
            response.pop("headers", None)
            response["content"] = {PROBLEM_MEDIA_TYPE: {"schema": _PROBLEM_REF}}
        if response.get("description") == "Validation Error":  # FastAPI's own 422
            response["description"] = _INVALID_REQUEST
        response.setdefault("headers", {})["X-Request-Id"] = _REQUEST_ID_REF
    operation["responses"] = dict(sorted(responses.items()))


def _described(*errors: type[AppError]) -> Iterable[tuple[int, str]]:
    return ((error.status, error.about) for error in errors)


# Path parameters, as the document declares them and FastAPI checks them (a 422).
Name = Annotated[
    str, Path(pattern=NAME_PATTERN, description="1-128 of letters, digits, '_', '.', '-'")
]
StoredText = Annotated[str, Path(pattern=r"^[^\x00]+$", description="no U+0000")]
TIME_FORMAT = {"format": "date-time"}  # a time parameter: RFC 3339, refused (400) otherwise
