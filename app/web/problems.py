"""RFC 9457 problem details for every error, and the catalogue behind each ``type``.

One handler covers the whole ``AppError`` tree (Starlette walks the MRO). Request
validation becomes 422 ``invalid-request`` with JSON Pointers; Starlette's own HTTP
errors (unknown route, wrong method) keep their status; anything unexpected is a 500
with a fixed detail, and the traceback goes to the log, never to the client. A lost
database or a statement timeout is a 503 with ``Retry-After``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from app.errors import AppError, NotFound, Unavailable, error_classes
from app.store.failures import DRIVER_ERRORS, as_app_error
from app.web.openapi import PROBLEM_MEDIA_TYPE, answers
from app.web.timeouts import SendTimedOut

MEDIA_TYPE = PROBLEM_MEDIA_TYPE
logger = logging.getLogger(__name__)

_CATALOGUE: dict[str, type[AppError]] = {cls.code: cls for cls in error_classes()}
_EXTRA = {
    "invalid-request": (
        "Invalid request",
        "A path, query or header parameter, or a member of the JSON body, is missing or "
        "malformed; errors names each with a JSON Pointer.",
    ),
    "http-error": ("HTTP error", "The route or method does not exist."),
}


def problem(
    status: int,
    code: str,
    title: str,
    detail: str,
    headers: dict[str, str] | None = None,
    **members: Any,
) -> JSONResponse:
    body = {"type": f"/problems/{code}", "title": title, "status": status, "detail": detail}
    body.update(members)
    return JSONResponse(body, status_code=status, headers=headers, media_type=MEDIA_TYPE)


def response_for(exc: Exception, method: str, path: str) -> JSONResponse:
    """The problem ``exc`` makes, exactly as the installed handlers answer it: for a path
    answered before the middleware stack (``POST /events``)."""
    if isinstance(exc, AppError):
        return _app_error(exc)
    if isinstance(exc, ClientDisconnect):
        return _gone(method, path)
    return _driver_error(method, path, exc)


def _app_error(exc: AppError) -> JSONResponse:
    # A 503 (the database away, a limit of concurrent work reached, not ready yet) is a
    # condition the client is told to retry, not a fault of the server: a warning, so
    # that an alert on ERROR lines fires for faults only.
    if isinstance(exc, Unavailable):
        logger.warning("%s: %s", exc.code, exc.detail)
    elif exc.status >= 500:
        logger.error("%s: %s", exc.code, exc.detail)
    return problem(exc.status, exc.code, exc.title, exc.detail, exc.headers, **exc.extensions)


def _driver_error(method: str, path: str, exc: Exception) -> JSONResponse:
    """A database that did not answer (503, ``Retry-After``: the transaction was rolled
    back, so a retry is safe) or a value PostgreSQL refused (400), as the store names
    them; any other error is unexpected."""
    named = as_app_error(exc)
    if named is None:
        return _unexpected(method, path, exc)
    if named.status >= 500:
        logger.warning("database unavailable on %s %s: %s", method, path, exc)
    return problem(named.status, named.code, named.title, named.detail, named.headers)


def _gone(method: str, path: str) -> JSONResponse:
    # A client that hung up mid-body: no server failure, so no error in the log (and
    # nobody will read the answer).
    logger.info("the client of %s %s went away before its whole body arrived", method, path)
    return problem(400, "bad-request", "Bad request", "the request body was cut short")


def _unexpected(method: str, path: str, exc: Exception) -> JSONResponse:
    logger.error("unexpected error on %s %s", method, path, exc_info=exc)
    return problem(500, "internal", "Internal error", "The server failed; see its log.")


async def on_app_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AppError)
    return _app_error(exc)


async def on_invalid_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {
            "pointer": "#/" + "/".join(str(part) for part in error.get("loc", ())),
            "detail": _detail(error),
        }
        for error in exc.errors()
    ]
    first = errors[0] if errors else {"pointer": "#", "detail": "invalid request"}
    return problem(
        422,
        "invalid-request",
        "Invalid request",
        f"{first['pointer']}: {first['detail']}",
        errors=errors,
    )


def _detail(error: Mapping[str, Any]) -> str:
    """A validation error's message; for a body that is not JSON, with what the parser
    said (``JSON decode error`` alone does not say what is wrong, nor where)."""
    message = str(error.get("msg", "invalid"))
    cause = (error.get("ctx") or {}).get("error") if error.get("type") == "json_invalid" else None
    return f"{message}: {cause}" if cause else message


async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if isinstance(exc.__cause__, AppError):
        # FastAPI turns any error while it reads a body into a 400 "error parsing the
        # body", raised from ours: the capped body's PayloadTooLarge is the answer (or
        # the key check's 401, 403: ``JSONRequest.body``).
        return _app_error(exc.__cause__)
    cause = exc.__cause__
    if isinstance(cause, Exception) and as_app_error(cause) is not None:
        # The key check's lookup, while the database is away: a 503 to retry, not a
        # body said to be malformed.
        return _driver_error(request.method, request.url.path, cause)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(_allowed(request))
    return problem(exc.status_code, "http-error", "HTTP error", str(exc.detail), headers)


def _allowed(request: Request) -> list[str]:
    """Every method some route takes at this path. Starlette's 405 names only the methods
    of the first route whose path matched, where RFC 9110 (15.5.6) asks for all of them:
    ``GET`` and ``DELETE /routes/{id}`` are two routes. Each method is asked of the
    routes as the router would (an included router answers for its own routes)."""
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(r.matches({**request.scope, "method": method})[0] is Match.FULL for r in routes)
    ]


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


async def on_driver_error(request: Request, exc: Exception) -> JSONResponse:
    return _driver_error(request.method, request.url.path, exc)


async def on_client_disconnect(request: Request, exc: Exception) -> JSONResponse:
    return _gone(request.method, request.url.path)


async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, SendTimedOut):
        # The client stopped reading its answer: no server failure (``Timeouts`` says so
        # in the log, once), and nobody would read a 500.
        raise exc
    return _unexpected(request.method, request.url.path, exc)


def describe(code: str) -> dict[str, Any]:
    """What ``GET /problems/{code}`` says about one problem type."""
    if code in _CATALOGUE:
        cls = _CATALOGUE[code]
        return {
            "type": f"/problems/{code}",
            "title": cls.title,
            "status": cls.status,
            "description": cls.about,
        }
    if code in _EXTRA:
        title, about = _EXTRA[code]
        return {"type": f"/problems/{code}", "title": title, "description": about}
    raise NotFound(f"no problem type {code!r}")


def install(app: FastAPI) -> None:
    app.add_exception_handler(AppError, on_app_error)
    app.add_exception_handler(RequestValidationError, on_invalid_request)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    # The driver's errors that name a condition of ours (app.store.failures): a lost
    # database, a statement timeout or no pooled connection free (503), a value
    # PostgreSQL cannot take (400).
    for driver_error in DRIVER_ERRORS:
        app.add_exception_handler(driver_error, on_driver_error)
    app.add_exception_handler(ClientDisconnect, on_client_disconnect)
    app.add_exception_handler(Exception, on_unexpected)

    @app.get("/problems/{code}", tags=["problems"], responses=answers(NotFound))
    async def read_problem(code: str) -> dict[str, Any]:
        return describe(code)
