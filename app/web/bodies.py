"""Request bodies read up to a limit: past it, a ``PayloadTooLarge`` (413) before the rest
of the body is read. The app caps the body of every request that can carry one
(``CappedRequest``); ``POST /events`` and GraphQL read theirs with ``receive_body``,
under their own limits."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Message, Receive, Send

from app.errors import PayloadTooLarge

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
    """A request whose JSON body holds text only. JSON may escape half of a UTF-16 pair
    (``"\\ud800"``), which Python's ``json`` reads into a ``str`` that no UTF-8 encoder
    takes, so such a value, deep in a model's tags or a route's types, failed only when
    the store encoded it: a 500. It is refused here as a body that is not JSON text
    (FastAPI answers a ``json.JSONDecodeError`` with a 422, ``json_invalid``). The
    standard library still reads the body: what it reads that orjson would not (numbers
    past 64 bits, ``Infinity``) reaches the route's own checks, which name the field."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            value = json.loads(body)
            try:  # written back as UTF-8 text, which fails on a lone surrogate, anywhere
                json.dumps(value, ensure_ascii=False).encode()
            except UnicodeEncodeError:
                raise json.JSONDecodeError(
                    "a string holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text",
                    body.decode(errors="replace"),
                    0,
                ) from None
            self._json = value
        return self._json


class JSONRoute(APIRoute):
    """The route class of every router with JSON bodies: their requests are ``JSONRequest``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def handle_json(request: Request) -> Response:
            return await handle(JSONRequest(request.scope, request.receive))

        return handle_json
