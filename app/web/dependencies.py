"""Request dependencies shared by the routers: the engine and the caller's principal."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from fastapi import Request

from app.db.engine import Engine
from app.errors import BadRequest, Forbidden, Unauthenticated
from app.settings import Settings
from app.store.keys import Principal, Scope
from app.web.auth import Authenticator

_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def engine_of(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def require(scope: Scope) -> Callable[[Request], Coroutine[Any, Any, Principal]]:
    """A dependency that authenticates the Bearer key and demands ``scope``."""

    async def principal(request: Request) -> Principal:
        return await authorize(
            request.app.state.authenticator, authorization_of(request.scope["headers"]), scope
        )

    return principal


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


async def authorize(authenticator: Authenticator, header: str, scope: Scope) -> Principal:
    """The principal of an ``Authorization`` header's Bearer key, if it has ``scope``."""
    return _permitted(await authenticator.authenticate(_bearer_key(header)), scope)


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
