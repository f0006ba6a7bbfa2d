"""The schema over HTTP at ``/graphql``: POST (and GET) queries need a key with the ``read``
scope; a browser's plain GET gets GraphiQL, which needs none.

Two faces share one schema, one way to build a request's context and one capped body
reader. The FastAPI router is the documented one (OpenAPI, GET, GraphiQL, and every
request under a path prefix). ``GraphQLApp`` is Strawberry's own ASGI integration of
the same view, which ``app.main.Causeway`` hands ``POST /graphql`` to before FastAPI's
middleware, routing and dependency solving (which took about half of a small query's
time in the server).
"""

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from cross_web import HTTPException, StarletteRequestAdapter  # of both Strawberry faces
from fastapi.routing import APIRoute
from starlette.requests import HTTPConnection
from starlette.requests import Request as StarletteRequest
from starlette.responses import HTMLResponse, Response
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.fastapi import GraphQLRouter
from strawberry.types.unset import UNSET

from app.errors import BadRequest
from app.graphql.context import Context
from app.graphql.limits import GraphQLLimits
from app.graphql.schema import create_schema
from app.projections.runner import ProjectionRunner
from app.store.keys import Principal, Scope
from app.web import json_text
from app.web.assets import graphiql_html
from app.web.auth import Authenticator
from app.web.bodies import receive_body
from app.web.dependencies import authorization_of, authorize, one_value_each
from app.web.reads import (
    MIN_POSITION_HEADER,
    MIN_POSITION_PARAMETER,
    ReadRouter,
    parse_min_position,
    refuse_repeated_min_position,
)

_GRAPHIQL = Principal(key_id="", tenant="", scopes=frozenset())
ContextOf = Callable[[HTTPConnection], Awaitable[Context]]


def _bounded_bodies(max_bytes: int) -> type[StarletteRequestAdapter]:
    class BoundedBody(StarletteRequestAdapter):
        """Strawberry reads a request's whole body before it parses the query: read up to
        the limit, and refuse the request (413) past it. A JSON body that is neither an
        object nor a list of them (``null``, a string, a number) is refused too: Strawberry
        would ask it for its ``query`` and fail with a 500."""

        async def get_body(self) -> bytes:
            json_text.refuse_other_charsets(self.headers.get("content-type", ""))
            body = await receive_body(
                self._request.receive,
                self.headers.get("content-length"),
                max_bytes,
                setting="graphql_max_request_bytes",
            )
            start = body.lstrip(b" \t\r\n")[:1]
            if start and start not in b"{[":
                json_text.loads(body)  # not JSON at all is the same problem everywhere
                raise BadRequest("a GraphQL request is a JSON object")
            return body

    return BoundedBody


async def _as_problem(answer: Awaitable[Any]) -> Any:
    """``answer``, with Strawberry's refusals of a request's shape (not JSON, no query,
    a batch, bad variables, the wrong content type) raised as a ``BadRequest``: both
    faces would answer them as plain text, and every error here is a problem."""
    try:
        return await answer
    except HTTPException as exc:
        if exc.status_code == 400:
            raise BadRequest(exc.reason) from None
        raise


logger = logging.getLogger(__name__)
_TOO_DEEP = {
    "message": "the answer nests too deep to be written as JSON",
    "extensions": {"code": "INTERNAL"},
}


def _encode(data: object) -> bytes:
    # orjson: the standard library's encoder took 2% of an audit request's time. orjson
    # stops at 255 levels of nesting, which an answer reaches a few levels short of its
    # data's own (``{"data": {"event": {"data": ...}}}``); the store refuses data past 128
    # levels, but older events may nest deeper, and the standard library encodes them.
    try:
        return orjson.dumps(data)
    except orjson.JSONEncodeError:
        pass
    try:
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
    except RecursionError:  # past Python's own limit (about 1,000 levels): only forged rows
        logger.error("unexpected error in GraphQL: an answer nests past what JSON encoders write")
        return orjson.dumps({"data": None, "errors": [_TOO_DEEP]})


# Values (strings, numbers, lists, objects) in one request's JSON: graphql-core coerces
# each variable value in Python, and 100,000 of them held the event loop for 0.2 s.
MAX_JSON_VALUES = 10_000


def _decode(data: str | bytes) -> Any:
    # The one rule for JSON (app.web.json_text): not JSON, or a member named twice, is
    # an InvalidJSON problem, as on every endpoint.
    document = json_text.loads(data.encode() if isinstance(data, str) else data)
    pending, count = [document], 0
    while pending:
        value = pending.pop()
        count += 1
        if count > MAX_JSON_VALUES:
            raise BadRequest(
                f"the request holds more than {MAX_JSON_VALUES} JSON values (its variables)"
            )
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return document


class _Router(GraphQLRouter[Context, None]):
    async def render_graphql_ide(self, request: StarletteRequest) -> HTMLResponse:  # noqa: ARG002
        # Strawberry's page loads GraphiQL from a CDN: this one, from this server.
        return HTMLResponse(graphiql_html())

    async def run(self, request: Any, context: Any = UNSET, root_value: Any = UNSET) -> Any:
        return await _as_problem(super().run(request, context=context, root_value=root_value))

    def encode_json(self, data: object) -> bytes:
        return _encode(data)

    def decode_json(self, data: str | bytes) -> Any:
        return _decode(data)


class GraphQLApp(GraphQL[Context, None]):
    """The same view as the router, as a bare ASGI app. An ``AppError`` from building the
    context (no key, the wrong scope) propagates, for the caller to answer as a problem,
    as FastAPI's handlers answer it on the router."""

    def __init__(self, router: _Router, context_of: ContextOf) -> None:
        super().__init__(router.schema, graphql_ide=router.graphql_ide)
        self.request_adapter_class = router.request_adapter_class
        self._context_of = context_of

    async def get_context(
        self,
        request: StarletteRequest | WebSocket,
        response: Response | WebSocket,  # noqa: ARG002  (Strawberry passes it by name)
    ) -> Context:
        if not isinstance(request, StarletteRequest):
            raise TypeError("GraphQLApp answers HTTP requests only: subscriptions go to the router")
        return await self._context_of(request)

    async def run(self, request: Any, context: Any = UNSET, root_value: Any = UNSET) -> Any:
        return await _as_problem(super().run(request, context=context, root_value=root_value))

    def encode_json(self, data: object) -> bytes:
        return _encode(data)

    def decode_json(self, data: str | bytes) -> Any:
        return _decode(data)


@dataclass(frozen=True, slots=True)
class GraphQLFaces:
    router: GraphQLRouter[Context, None]
    app: GraphQLApp


def create_graphql(
    reads: ReadRouter,
    projections: ProjectionRunner,
    authenticator: Authenticator,
    limits: GraphQLLimits,
) -> GraphQLFaces:
    """Each request reads where ``reads`` sends it (a replica, or the primary): its
    walks on the source's walk pool, its other reads on the source's GraphQL engine, in
    autocommit (each statement stands alone: one round trip, not BEGIN and ROLLBACK
    around it). The ``statement_timeout`` of both's sessions is the request's time
    budget, so PostgreSQL itself stops a read past it. A request that names a position
    (``Causeway-Min-Position``, or ``min_position`` in the URL) reads where it shows."""

    async def context_of(request: HTTPConnection) -> Context:
        if (
            request.scope["type"] == "http"
            and request.scope["method"] == "GET"
            and "query" not in request.query_params
        ):  # the GraphiQL page: no data in it
            return Context(reads.primary, _GRAPHIQL, limits, reads=reads, projections=projections)
        header = authorization_of(request.scope["headers"])
        principal = await authorize(authenticator, header, Scope.READ)
        # POST /graphql is answered before FastAPI (app.main), past its app-wide check.
        await one_value_each(request)
        refuse_repeated_min_position(request.scope["headers"])
        min_position = (
            max(
                parse_min_position(request.headers.get(MIN_POSITION_HEADER)) or 0,
                parse_min_position(request.query_params.get(MIN_POSITION_PARAMETER)) or 0,
            )
            or None
        )
        source = await reads.for_log(min_position)
        return Context(
            source, principal, limits, reads=reads, projections=projections,
            min_position=min_position,
        )  # fmt: skip

    async def context(request: HTTPConnection) -> Context:  # a FastAPI dependency
        return await context_of(request)

    # No subscriptions in the schema, so no websocket protocol: a websocket is refused
    # (closed with 4406) rather than kept open for nothing.
    router = _Router(
        create_schema(limits),
        context_getter=context,
        graphql_ide="graphiql",
        subscription_protocols=(),
    )
    router.request_adapter_class = _bounded_bodies(limits.max_request_bytes)
    _document(router)
    return GraphQLFaces(router, GraphQLApp(router, context_of))


_QUERY = {"type": "string", "minLength": 1, "description": "a GraphQL document"}
_OPERATION = {"type": "string", "description": "the operation of the document to run"}
_ANSWER: dict[str, Any] = {
    "description": "The GraphQL answer: data, and errors (a query that does not parse or "
    "validate is answered here too, with errors and no data)",
    "content": {"application/json": {"schema": {"type": "object"}}},
}
# What Strawberry's routes take and answer, for the OpenAPI document: the schema itself is
# at /graphql (introspection) and in docs/schema.graphql.
_DOCUMENTED: dict[str, dict[str, Any]] = {
    "GET": {
        "summary": "GraphiQL in a browser; a query (read only) with ?query=",
        "openapi_extra": {
            "parameters": [
                {"name": "query", "in": "query", "schema": _QUERY},
                {"name": "operationName", "in": "query", "schema": _OPERATION},
            ]
        },
        "responses": {
            200: {
                "description": "GraphiQL, without query; the answer, with one",
                "content": {"text/html": {"schema": {"type": "string"}}, **_ANSWER["content"]},
            }
        },
    },
    "POST": {
        "summary": "Run a GraphQL query",
        "openapi_extra": {
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "required": ["query"],
                            "properties": {
                                "query": _QUERY,
                                # anything but a string names no operation: ignored
                                "operationName": {},
                                "variables": {"anyOf": [{"type": "object"}, {"type": "null"}]},
                            },
                        }
                    }
                },
            }
        },
        "responses": {200: _ANSWER},
    },
}


def _document(router: GraphQLRouter[Context, None]) -> None:
    """Strawberry's routes, as the OpenAPI document shows them (it declares neither the
    query parameters nor the body, and a 404 it never gives here)."""
    for route in router.routes:
        if isinstance(route, APIRoute) and (
            methods := set(route.methods or ()) & _DOCUMENTED.keys()
        ):
            documented = _DOCUMENTED[methods.pop()]
            route.summary = documented["summary"]
            route.openapi_extra = documented["openapi_extra"]
            route.responses = documented["responses"]
