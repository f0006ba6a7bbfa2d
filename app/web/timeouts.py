"""Time limits on the two slow parties of a request that the HTTP server does not time:
a client whose body stops arriving, and a client that stops taking its answer.

uvicorn (``causeway serve``) has no setting for either, so both are kept here, with
nothing but ASGI's own calls:

- ``receive()`` while the request's body is still coming, under ``body_timeout_s``: past
  it the request fails with a ``BodyTimeout`` (408), as nginx's ``client_body_timeout``
  does, and its handler lets go of what it held. Once the body is complete ``receive()``
  waits for the client to leave, for as long as it takes.
- ``send()`` of the answer, its head and each piece of its body, under
  ``send_timeout_s``. uvicorn holds ``send()`` while the client takes nothing (its socket
  buffers are full), so a reader that stopped reading a long replay, or a client that
  pipelines requests and reads no answer, waits there; past the time the request ends,
  its database connection and replay slot are given back, and the server closes the
  connection with the answer cut short (a chunked answer without its last chunk, which a
  client reports as an error). Every later ``send()`` of that request fails at once, so
  nothing (an error page, say) waits out the time again. Like nginx's ``send_timeout``
  the time runs per write, not over the whole answer: a slow reader that keeps reading is
  served to the end.

What the server gives no setting for and the app cannot see (the request head's size and
time, a lingering close after a refusal) is the proxy's in front: docs/deployment.md.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import BodyTimeout

logger = logging.getLogger(__name__)


class SendTimedOut(Exception):
    """The client took no byte of its answer for ``send_timeout_s``."""


class Timeouts:
    """ASGI middleware: ``body_timeout_s`` on reading a body, ``send_timeout_s`` on
    writing an answer's body (see the module's docstring)."""

    def __init__(self, app: ASGIApp, *, body_timeout_s: float, send_timeout_s: float) -> None:
        self.app = app
        self.body_timeout_s = body_timeout_s
        self.send_timeout_s = send_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        timed = _Timed(receive, send, self.body_timeout_s, self.send_timeout_s)
        try:
            await self.app(scope, timed.receive, timed.send)
        except* SendTimedOut:  # a streaming answer's task group may wrap it
            logger.warning(
                "a client took no byte of its answer to %s %s for %g s; closing its connection",
                scope["method"],
                scope["path"],
                self.send_timeout_s,
            )


class _Timed:
    __slots__ = (
        "_body_timeout_s",
        "_has_body",
        "_receive",
        "_send",
        "_send_timeout_s",
        "_stalled",
    )

    def __init__(
        self, receive: Receive, send: Send, body_timeout_s: float, send_timeout_s: float
    ) -> None:
        self._receive = receive
        self._send = send
        self._body_timeout_s = body_timeout_s
        self._send_timeout_s = send_timeout_s
        self._has_body = True  # until a message says the body is complete
        self._stalled = False  # a send timed out: the client is not reading

    async def receive(self) -> Message:
        if not self._has_body:
            return await self._receive()  # the client leaving, whenever it does
        try:
            async with asyncio.timeout(self._body_timeout_s):
                message = await self._receive()
        except TimeoutError:
            raise BodyTimeout(
                f"no byte of the request body arrived for {self._body_timeout_s:g} s"
            ) from None
        if message["type"] != "http.request" or not message.get("more_body", False):
            self._has_body = False
        return message

    async def send(self, message: Message) -> None:
        if self._stalled:
            raise SendTimedOut
        try:
            async with asyncio.timeout(self._send_timeout_s):
                await self._send(message)
        except TimeoutError:
            self._stalled = True
            raise SendTimedOut from None
