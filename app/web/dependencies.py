"""Request dependencies shared by the routers: the engine and the caller's principal."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Annotated, Any

from fastapi import Depends, Header, Query, Request, Security
from fastapi.requests import HTTPConnection
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BeforeValidator

from app.db.engine import Connector, Engine
from app.db.tenancy import TenantReadsChosenLater
from app.errors import BadRequest, Forbidden, Unauthenticated
from app.settings import Settings
from app.store.keys import Principal, Scope
from app.store.records import MAX_POSITION
from app.telemetry import logs
from app.web.auth import Authenticator
from app.web.openapi import bearer
from app.web.reads import ReadRouter, refuse_repeated_min_position

_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def engine_of(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def _integer_only(schema: dict[str, Any]) -> None:
    """The document's schema of an optional integer parameter: an integer. Left out, it is
    None; a query or a header has no way to say null ("null" is text, refused)."""
    [integer] = [s for s in schema.pop("anyOf", []) if s.get("type") != "null"]
    schema.update(integer)


def _plain_digits(value: object) -> object:
    """A number in a query or a header as ASCII digits alone: pydantic's lax ``int`` also
    reads ``1_0`` (10), ``+2``, `` 2 `` and ``2.0``, so a mangled cursor (``after=1_0``)
    was read as another position, and its answer silently skipped events."""
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError("must be a whole number written in the digits 0-9 alone")
    return value


PLAIN_DIGITS = BeforeValidator(_plain_digits)
"""With a query or header parameter's int: read from ASCII digits alone."""

MinPositionQuery = Annotated[
    int | None,
    Query(
        ge=0,
        le=MAX_POSITION,
        description="read-your-writes: wait until what is read shows this position "
        "(a Causeway-Position answered by a write)",
        examples=[0],
        json_schema_extra=_integer_only,
    ),
    PLAIN_DIGITS,  # after the Query: before it, the document's schema says ge, not minimum
]
MinPositionHeader = Annotated[
    int | None,
    Header(
        ge=0,
        le=MAX_POSITION,
        description="the same as the min_position parameter",
        examples=[0],
        json_schema_extra=_integer_only,
    ),
    PLAIN_DIGITS,
]


async def log_reads(
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.READ))],
    min_position: MinPositionQuery = None,
    causeway_min_position: MinPositionHeader = None,
) -> TenantReadsChosenLater:
    """Connections for a read of the log by the caller's tenant, which see no other
    tenant's rows (``app.db.tenancy``): on a replica, or the primary
    (``app.web.reads``); with a position named, on one that shows it."""
    router: ReadRouter = request.app.state.read_router
    wanted = _wanted(request, min_position, causeway_min_position)

    async def choose() -> Connector:
        return (await router.for_log(wanted)).rest

    return TenantReadsChosenLater(choose, principal.tenant)


def read_model_reads(projection_name: str) -> Callable[..., Coroutine[Any, Any, Connector]]:
    """A dependency: connections for a read of the read model of ``projection_name``;
    with a position named, where that read model shows it (else 503)."""

    async def reads(
        request: Request,
        principal: Annotated[Principal, Depends(require(Scope.READ))],
        min_position: MinPositionQuery = None,
        causeway_min_position: MinPositionHeader = None,
    ) -> Connector:
        router: ReadRouter = request.app.state.read_router
        projection = request.app.state.runner.projection(projection_name)
        wanted = _wanted(request, min_position, causeway_min_position)

        async def choose() -> Connector:
            return (await router.for_read_model(projection, wanted)).rest

        return TenantReadsChosenLater(choose, principal.tenant)

    return reads


Settle = Callable[[], Awaitable[None]]


def settled_on_primary(
    caller: Callable[..., Coroutine[Any, Any, Principal]], *projection_names: str
) -> Callable[..., Coroutine[Any, Any, Settle]]:
    """A dependency for reads that stay on the primary (the scheduler's): the wait, for
    the route to await once it has read its parameters. With a position named, it waits
    until the read models ``projection_names`` show it, one after the other
    (``ReadRouter.settle_on_primary``), else 503. ``caller`` (the route's own key check,
    which FastAPI then runs once) runs first: a caller without the key the route needs is
    refused at once, never held and told to retry; and the wait comes after FastAPI and
    the route have checked the request, so a malformed one is told what is wrong with it
    at once."""

    async def settled(
        request: Request,
        min_position: MinPositionQuery = None,
        causeway_min_position: MinPositionHeader = None,
        # A default, not an Annotated[...] type: this module's annotations are strings,
        # which FastAPI resolves in the module's globals, where ``caller`` is not.
        _: Principal = Depends(caller),  # noqa: B008 - FastAPI's documented form
    ) -> Settle:
        router: ReadRouter = request.app.state.read_router
        runner = request.app.state.runner
        chain = [runner.projection(name) for name in projection_names]
        wanted = _wanted(request, min_position, causeway_min_position)

        async def settle() -> None:
            await router.settle_on_primary(chain, wanted)

        return settle

    return settled


def _wanted(request: Request, query: int | None, header: int | None) -> int | None:
    """The position a read must show: the higher of the parameter and the header (given
    once at most: FastAPI reads the first of several)."""
    refuse_repeated_min_position(request.scope["headers"])
    given = [p for p in (query, header) if p is not None]
    return max(given) if given else None


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


@functools.cache
def require(
    scope: Scope, *, in_outage: bool = False
) -> Callable[..., Coroutine[Any, Any, Principal]]:
    """A dependency that authenticates the Bearer key and demands ``scope``. One per
    scope (cached), so that FastAPI, which runs each dependency once per request, does
    not authenticate twice for a route and the read dependencies that ask the same.
    ``in_outage``: for ``GET /metrics`` only (``Authenticator.authenticate``)."""

    async def principal(
        request: Request,
        _: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],  # the document's
    ) -> Principal:
        header = authorization_of(request.scope["headers"])
        authenticator = request.app.state.authenticator
        return await authorize(authenticator, header, scope, in_outage=in_outage)

    return principal


async def still_authorized(request: Request, scope: Scope) -> bool:
    """Whether the request's key still has ``scope``: for a response that goes on long
    after the request was authorized (a watch), which must end once the key is revoked
    (within ``CAUSEWAY_KEY_CACHE_TTL_S``, as every request sees it)."""
    try:
        await authorize(
            request.app.state.authenticator, authorization_of(request.scope["headers"]), scope
        )
    except (Unauthenticated, Forbidden):
        return False
    return True


def authorization_of(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """A request's one ``Authorization`` header (ASGI headers), ``""`` when it has none.
    Two are refused (400): servers and proxies differ on which one counts, so a request
    that names two callers is not answered as either."""
    found: bytes | None = None
    for name, value in headers:
        if name == b"authorization":
            if found is not None:
                raise BadRequest(
                    "the request has more than one Authorization header; send one",
                    header="authorization",
                )
            found = value
    return "" if found is None else found.decode("latin-1")


async def authorize(
    authenticator: Authenticator, header: str, scope: Scope, *, in_outage: bool = False
) -> Principal:
    """The principal of an ``Authorization`` header's Bearer key, if it has ``scope``.
    The key's tenant goes on every line logged for the rest of the request."""
    found = await authenticator.authenticate(_bearer_key(header), in_outage=in_outage)
    if found is not None:
        logs.tenant.set(found.tenant)
    return _permitted(found, scope)


def _bearer_key(header: str) -> str:
    kind, _, key = header.partition(" ")
    if kind.lower() != "bearer" or not key.strip():
        raise Unauthenticated("send 'Authorization: Bearer <key>'", headers=_CHALLENGE)
    return key.strip()


def _permitted(found: Principal | None, scope: Scope) -> Principal:
    if found is None:
        raise Unauthenticated("the API key is unknown or revoked", headers=_CHALLENGE)
    if scope not in found.scopes and Scope.ADMIN not in found.scopes:
        raise Forbidden(
            f"this needs the {scope.value!r} scope; the key has "
            f"{', '.join(sorted(found.scopes)) or 'none'}",
            required=scope.value,
        )
    return found


# The one query parameter the API takes more than once (``GET /replay``'s types).
REPEATABLE = frozenset({"types"})


async def one_value_each(request: HTTPConnection) -> None:  # a WebSocket's too
    """Refuse a query parameter given twice where it takes one value: the framework would
    keep the last, and ``/replay?correlationid=a&correlationid=b`` answered with b's
    events alone, ``/deployments/x?at=..&at=..`` with the state at the second time."""
    refuse_repeated([name for name, _ in request.query_params.multi_items()])


def refuse_repeated(names: list[str]) -> None:
    """``one_value_each`` on a query's parameter names, in order (``POST /events`` at the
    root, answered before FastAPI, asks it too)."""
    seen: set[str] = set()
    for name in names:
        if name in seen and name not in REPEATABLE:
            given = names.count(name)
            raise BadRequest(f"{name} is given {given} times: it takes one value", parameter=name)
        seen.add(name)
