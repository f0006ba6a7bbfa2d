"""Request bodies read up to a limit: past it, a ``PayloadTooLarge`` (413) before the rest
of the body is read. The app caps the body of every request that can carry one
(``CappedRequest``); ``POST /events`` and GraphQL read theirs with ``receive_body``,
under their own limits."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar

from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Message, Receive, Send

from app.errors import InvalidJSON, PayloadTooLarge
from app.store.keys import Scope
from app.web import json_text
from app.web.dependencies import authorization_of, authorize

MAX_REQUEST_BYTES = "max_request_bytes"  # the setting that caps every request body


async def receive_body(
    receive: Receive, declared: str | None, max_bytes: int, *, setting: str = MAX_REQUEST_BYTES
) -> bytes:
    """A request body from ASGI ``receive``, refused past ``max_bytes``: at once when the
    declared length is over, else as soon as the bytes received are. ``setting`` names
    the limit in the problem (``CAUSEWAY_`` + its upper case sets it)."""
    refused = declared_too_large(declared, max_bytes, setting=setting)
    if refused is not None:
        raise refused
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        body += message.get("body", b"")
        if len(body) > max_bytes:
            raise too_large(len(body), max_bytes, setting, at_least=True)
        if not message.get("more_body", False):
            return bytes(body)


class CappedRequest:
    """One request's ASGI ``receive`` and ``send``. ``receive`` raises ``PayloadTooLarge``
    once the body passes ``max_bytes``, whoever reads it (a route's body parameter is read
    before its dependencies run, so before the caller's key is checked), until the
    response starts: a streaming response keeps reading, to hear the client leave, and
    throws the rest away. ``started`` says whether it has."""

    def __init__(
        self, receive: Receive, send: Send, max_bytes: int, *, setting: str = MAX_REQUEST_BYTES
    ) -> None:
        self._receive = receive
        self._send = send
        self._max_bytes = max_bytes
        self._setting = setting
        self._received = 0
        self.started = False

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request" and not self.started:
            self._received += len(message.get("body", b""))
            if self._received > self._max_bytes:
                raise too_large(self._received, self._max_bytes, self._setting, at_least=True)
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


def declared_too_large(
    declared: str | None, max_bytes: int, *, setting: str = MAX_REQUEST_BYTES
) -> PayloadTooLarge | None:
    """The refusal of a request whose ``Content-Length`` is over ``max_bytes``, if it is."""
    # isascii: str.isdigit() also accepts digits int() refuses, such as "²".
    if not (declared and declared.isascii() and declared.isdigit()):
        return None
    # Leading zeros are allowed (HTTP parsers take them), and int() refuses thousands of
    # digits: a length of more than 19 is past any cap, and said as at least 10**19.
    digits = declared.lstrip("0") or "0"
    if len(digits) > 19:
        return too_large(10**19, max_bytes, setting, at_least=True)
    size = int(digits)
    return too_large(size, max_bytes, setting) if size > max_bytes else None


def too_large(size: int, limit: int, setting: str, *, at_least: bool = False) -> PayloadTooLarge:
    over = "at least " if at_least else ""
    return PayloadTooLarge(
        f"the request body is {over}{size} bytes, over the {limit}-byte limit by {over}"
        f"{size - limit}",
        limit=setting,
        max_bytes=limit,
    )


class JSONRequest(Request):
    """A request whose JSON body is at most ``max_json_body_bytes`` (a model version, a
    route, a lease request: small documents, whose reading by the standard library takes
    a millisecond per 10,000 objects on the event loop; past it, a 413), read by the
    one rule for JSON (``json_text``): what
    is not JSON, or names a member twice, is an ``InvalidJSON`` (400), as on ``POST
    /events`` (FastAPI raises any error but a ``json.JSONDecodeError`` as a 400 caused by
    it, which ``problems`` answers as that error). And the body holds text only: JSON may
    escape half of a UTF-16 pair (``"\\ud800"``), which Python's ``json`` reads into a
    ``str`` that no UTF-8 encoder takes, so such a value, deep in a model's tags or a
    route's types, failed only when the store encoded it: a 500. The standard library
    reads the body: what it reads that orjson would not (numbers past 64 bits,
    ``Infinity``) reaches the route's own checks, which name the field.

    FastAPI reads a route's body before it runs the route's dependencies, its key check
    among them: so the key is checked here first, before the body is read (``body``, as
    FastAPI's guide to a custom request class overrides it), for the scope the route's
    body needs (``needs``, from ``json_route``). A caller without it learns that (401,
    403), not what is wrong with a body it could not send anyway, and no body is read for
    it: no ``100 Continue`` is sent, and a body declared past the cap is refused at once.
    (Only ``json`` checked the key and the cap, after FastAPI had read the whole body.)"""

    needs: Scope | None = None

    async def body(self) -> bytes:
        if not hasattr(self, "_body"):
            if self.needs is not None:
                header = authorization_of(self.scope["headers"])
                await authorize(self.app.state.authenticator, header, self.needs)
            self._body = await receive_body(
                self.receive,
                self.headers.get("content-length"),
                self.app.state.settings.max_json_body_bytes,
                setting="max_json_body_bytes",
            )
        return self._body

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            self._json = read_json(body, self.headers.get("content-type", ""))
        return self._json


def read_json(body: bytes, content_type: str) -> Any:
    """A JSON endpoint's body (``JSONRequest``), read and refused as ``JSONRequest``
    says (and in a charset other than UTF-8, a 415): for a route that reads its body
    itself."""
    json_text.refuse_other_charsets(content_type)
    value = json_text.loads_standard(body)
    try:  # written back as UTF-8 text, which fails on a lone surrogate, anywhere
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise InvalidJSON(
            "the body is not valid JSON: a string holds a lone UTF-16 surrogate "
            "(\\ud800-\\udfff), which is not text"
        ) from None
    return value


class JSONRoute(APIRoute):
    """The route class of every router with JSON bodies: their requests are ``JSONRequest``.
    ``json_route(scope)`` makes one for a router whose bodies all need ``scope``."""

    needs: ClassVar[Scope | None] = None

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()
        needs = self.needs

        async def handle_json(request: Request) -> Response:
            json_request = JSONRequest(request.scope, request.receive)
            json_request.needs = needs
            return await handle(json_request)

        return handle_json


@functools.cache
def json_route(needs: Scope) -> type[JSONRoute]:
    """The route class of a router whose JSON bodies are all for keys with ``needs``: a
    caller's key is checked before its body is read (``JSONRequest``)."""
    return type(f"JSONRoute_{needs.value}", (JSONRoute,), {"needs": needs})
