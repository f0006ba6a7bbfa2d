"""Request dependencies shared by the routers: the engine and the caller's principal."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Request, Security
from fastapi.security import HTTPAuthorizationCredentials

from app.db.engine import Engine
from app.errors import Forbidden, Unauthenticated
from app.settings import Settings
from app.store.keys import Principal, Scope
from app.web.auth import Authenticator
from app.web.openapi import bearer

_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def engine_of(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def require(scope: Scope) -> Callable[..., Coroutine[Any, Any, Principal]]:
    """A dependency that authenticates the Bearer key and demands ``scope``."""

    async def principal(
        request: Request,
        _: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],  # the document's
    ) -> Principal:
        return await authorize(
            request.app.state.authenticator, request.headers.get("authorization", ""), scope
        )

    return principal


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
