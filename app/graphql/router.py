"""Mounts the schema at ``/graphql``: POST (and GET) queries need a key with the ``read``
scope; a browser's plain GET gets GraphiQL, which needs none."""

from typing import Any

import orjson
from cross_web import StarletteRequestAdapter  # the adapter Strawberry's FastAPI router uses
from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncEngine
from strawberry.fastapi import GraphQLRouter

from app.api.deps import require
from app.graphql.context import Context
from app.graphql.limits import GraphQLLimits
from app.graphql.schema import create_schema
from app.store.keys import Principal, Scope
from ingest.bodies import receive_body

_read = require(Scope.READ)
_GRAPHIQL = Principal(key_id="", tenant="", scopes=frozenset())


def _bounded_bodies(max_bytes: int) -> type[StarletteRequestAdapter]:
    class BoundedBody(StarletteRequestAdapter):
        """Strawberry reads a request's whole body before it parses the query: read up to
        the limit, and refuse the request (413) past it."""

        async def get_body(self) -> bytes:
            return await receive_body(
                self._request.receive,
                self.headers.get("content-length"),
                max_bytes,
                setting="graphql_max_request_bytes",
            )

    return BoundedBody


class _Router(GraphQLRouter[Context, None]):
    def encode_json(self, data: object) -> bytes:
        # orjson: the standard library's encoder took 2% of an audit request's time.
        return orjson.dumps(data)

    def decode_json(self, data: str | bytes) -> Any:
        return orjson.loads(data)


def create_router(
    engine: AsyncEngine, walks: AsyncEngine, limits: GraphQLLimits
) -> GraphQLRouter[Context, None]:
    """``walks`` serves the lineage and audit walks: its sessions' ``statement_timeout`` is
    the walks' time budget, so PostgreSQL itself stops a walk past it, and its sessions
    run without transactions (``create_engine(autocommit=True)``)."""
    # GraphQL only reads, and each of its statements stands alone (under READ COMMITTED
    # each had a snapshot of its own anyway): without a transaction, a read is one round
    # trip instead of three (BEGIN, the read, ROLLBACK).
    reads = engine.execution_options(isolation_level="AUTOCOMMIT")

    async def context(request: Request) -> Context:
        if request.method == "GET" and "query" not in request.query_params:
            return Context(reads, walks, _GRAPHIQL, limits)  # the GraphiQL page: no data in it
        return Context(reads, walks, await _read(request), limits)

    router = _Router(create_schema(limits), context_getter=context, graphql_ide="graphiql")
    router.request_adapter_class = _bounded_bodies(limits.max_request_bytes)
    return router
