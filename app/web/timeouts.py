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

And a bounded lingering close of an answer given before its request's body was read to
its end (a 413 on the declared length, a 401 before the body): uvicorn, after such an
answer on a kept-alive connection, reads and drops the rest of the declared body however
long it is (29.5 GB in 15 s, without a key), and with ``Connection: close`` closes at
once, so a client still sending gets a reset instead of the answer. Here such an answer
says ``Connection: close`` (uvicorn then closes the connection after it rather than read
on), its body is sent whole, and before the answer is ended the rest of the request's
body is read and dropped, at most ``linger_bytes`` of it and for at most ``linger_s``
(``CAUSEWAY_LINGER_BYTES``, ``CAUSEWAY_LINGER_S``): a client that finishes sending within
them reads its answer; past them the connection closes with the client's bytes unread.
A request that asked for ``Expect: 100-continue`` has sent no body: nothing is read.

What the server gives no setting for and the app cannot see (the request head's size and
time, a lingering close past those bounds) is the proxy's in front: docs/deployment.md.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import BodyTimeout

logger = logging.getLogger(__name__)


class SendTimedOut(Exception):
    """The client took no byte of its answer for ``send_timeout_s``."""


class Timeouts:
    """ASGI middleware: ``body_timeout_s`` on reading a body, ``send_timeout_s`` on
    writing an answer's body (see the module's docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        body_timeout_s: float,
        send_timeout_s: float,
        linger: Linger | None = None,
    ) -> None:
        self.app = app
        self.body_timeout_s = body_timeout_s
        self.send_timeout_s = send_timeout_s
        self.linger = linger or Linger()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        timed = _Timed(scope, receive, send, self.body_timeout_s, self.send_timeout_s, self.linger)
        try:
            await self.app(scope, timed.receive, timed.send)
        except* SendTimedOut:  # a streaming answer's task group may wrap it
            logger.warning(
                "a client took no byte of its answer to %s %s for %g s; closing its connection",
                scope["method"],
                scope["path"],
                self.send_timeout_s,
            )


@dataclass(frozen=True, slots=True)
class Linger:
    """How much of a body still coming after its answer is read before the connection
    closes: at most ``max_bytes``, for at most ``max_s``."""

    max_bytes: int = 32 << 20
    max_s: float = 5.0


class _Timed:
    __slots__ = (
        "_body_timeout_s",
        "_has_body",
        "_linger",
        "_lingers",
        "_receive",
        "_scope",
        "_send",
        "_send_timeout_s",
        "_stalled",
        "_timed_out",
    )

    def __init__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        body_timeout_s: float,
        send_timeout_s: float,
        linger: Linger,
    ) -> None:
        self._scope = scope
        self._receive = receive
        self._send = send
        self._body_timeout_s = body_timeout_s
        self._send_timeout_s = send_timeout_s
        self._linger = linger
        self._has_body = True  # until a message says the body is complete
        self._stalled = False  # a send timed out: the client is not reading
        self._lingers = False  # answered before its body was read: linger, then close
        self._timed_out = False  # the body stopped arriving: nothing to linger for

    async def receive(self) -> Message:
        if not self._has_body:
            return await self._receive()  # the client leaving, whenever it does
        try:
            async with asyncio.timeout(self._body_timeout_s):
                message = await self._receive()
        except TimeoutError:
            self._timed_out = True
            raise BodyTimeout(
                f"no byte of the request body arrived for {self._body_timeout_s:g} s"
            ) from None
        if message["type"] != "http.request" or not message.get("more_body", False):
            self._has_body = False
        return message

    async def send(self, message: Message) -> None:
        if self._stalled:
            raise SendTimedOut
        if self._has_body:  # answered before the body was read to its end (or a GET)
            if message["type"] == "http.response.start":
                message = self._closing(message)
            elif self._lingers and not message.get("more_body", False):
                await self._timed_send({**message, "more_body": True})
                await self._drain()
                message = {"type": "http.response.body", "body": b"", "more_body": False}
        await self._timed_send(message)

    def _closing(self, start: Message) -> Message:
        """``start``, saying ``Connection: close`` when the request has a body not read
        to its end (and lingering for it unless the client waits for ``100 Continue``)."""
        length, expects = b"", False
        for name, value in self._scope["headers"]:
            if name == b"content-length":
                length = value
            elif name == b"transfer-encoding":
                length = b"chunked"
            elif name == b"expect":
                expects = value.lower() == b"100-continue"
        if not length or length.strip(b"0") == b"":
            self._has_body = False  # no body: nothing to linger for
            return start
        self._lingers = not (expects or self._timed_out)
        headers = [*start.get("headers", []), (b"connection", b"close")]
        return {**start, "headers": headers}

    async def _drain(self) -> None:
        """Read and drop what comes of the body, within the linger's bounds."""
        left = self._linger.max_bytes
        try:
            async with asyncio.timeout(self._linger.max_s):
                while left > 0:
                    message = await self._receive()
                    if message["type"] != "http.request":
                        return
                    left -= len(message.get("body", b""))
                    if not message.get("more_body", False):
                        return
        except TimeoutError:
            return

    async def _timed_send(self, message: Message) -> None:
        try:
            async with asyncio.timeout(self._send_timeout_s):
                await self._send(message)
        except TimeoutError:
            self._stalled = True
            raise SendTimedOut from None
