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
from starlette.requests import HTTPConnection
from starlette.requests import Request as StarletteRequest
from starlette.responses import HTMLResponse, Response
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.fastapi import GraphQLRouter
from strawberry.types.unset import UNSET

from app.db.engine import DriverPool, Engine
from app.errors import BadRequest
from app.graphql.context import Context
from app.graphql.limits import GraphQLLimits
from app.graphql.schema import create_schema
from app.store.keys import Principal, Scope
from app.web.assets import graphiql_html
from app.web.auth import Authenticator
from app.web.bodies import receive_body
from app.web.dependencies import authorize

_GRAPHIQL = Principal(key_id="", tenant="", scopes=frozenset())
ContextOf = Callable[[HTTPConnection], Awaitable[Context]]


def _bounded_bodies(max_bytes: int) -> type[StarletteRequestAdapter]:
    class BoundedBody(StarletteRequestAdapter):
        """Strawberry reads a request's whole body before it parses the query: read up to
        the limit, and refuse the request (413) past it. A JSON body that is neither an
        object nor a list of them (``null``, a string, a number) is refused too: Strawberry
        would ask it for its ``query`` and fail with a 500."""

        async def get_body(self) -> bytes:
            body = await receive_body(
                self._request.receive,
                self.headers.get("content-length"),
                max_bytes,
                setting="graphql_max_request_bytes",
            )
            start = body.lstrip(b" \t\r\n")[:1]
            if start and start not in b"{[":
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


class _Router(GraphQLRouter[Context, None]):
    async def render_graphql_ide(self, request: StarletteRequest) -> HTMLResponse:  # noqa: ARG002
        # Strawberry's page loads GraphiQL from a CDN: this one, from this server.
        return HTMLResponse(graphiql_html())

    async def run(self, request: Any, context: Any = UNSET, root_value: Any = UNSET) -> Any:
        return await _as_problem(super().run(request, context=context, root_value=root_value))

    def encode_json(self, data: object) -> bytes:
        return _encode(data)

    def decode_json(self, data: str | bytes) -> Any:
        return orjson.loads(data)


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
        return orjson.loads(data)


@dataclass(frozen=True, slots=True)
class GraphQLFaces:
    router: GraphQLRouter[Context, None]
    app: GraphQLApp


def create_graphql(
    engine: Engine, walks: DriverPool, authenticator: Authenticator, limits: GraphQLLimits
) -> GraphQLFaces:
    """``walks`` serves the lineage and audit walks, ``engine`` every other read: the
    ``statement_timeout`` of both's sessions is the request's time budget, so PostgreSQL
    itself stops a read past it."""
    # GraphQL only reads, and each of its statements stands alone (under READ COMMITTED
    # each had a snapshot of its own anyway): without a transaction, a read is one round
    # trip instead of three (BEGIN, the read, ROLLBACK).
    reads = engine.execution_options(isolation_level="AUTOCOMMIT")

    async def context_of(request: HTTPConnection) -> Context:
        if (
            request.scope["type"] == "http"
            and request.scope["method"] == "GET"
            and "query" not in request.query_params
        ):
            return Context(reads, walks, _GRAPHIQL, limits)  # the GraphiQL page: no data in it
        header = request.headers.get("authorization", "")
        return Context(reads, walks, await authorize(authenticator, header, Scope.READ), limits)

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
    return GraphQLFaces(router, GraphQLApp(router, context_of))
