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
A request that asked for ``Expect: 100-continue`` has sent no body, and one whose body
stopped arriving (408) will send no more: nothing is read for them.

What the server gives no setting for and the app cannot see (the request head's size and
time, a lingering close past those bounds) is the proxy's in front: docs/deployment.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import BodyTimeout, Unavailable

logger = logging.getLogger(__name__)

_STOPPING = orjson.dumps(
    {
        "type": f"/problems/{Unavailable.code}",
        "title": Unavailable.title,
        "status": Unavailable.status,
        "detail": "the service is stopping; send the request again",
    }
)


class SendTimedOut(Exception):
    """The client took no byte of its answer for ``send_timeout_s``."""


@dataclass(frozen=True, slots=True)
class Linger:
    """How much of a body still coming after its answer is read before the connection
    closes: at most ``max_bytes``, for at most ``max_s``."""

    max_bytes: int = 32 << 20
    max_s: float = 5.0


class Timeouts:
    """ASGI middleware: ``body_timeout_s`` on reading a body, ``send_timeout_s`` on
    writing an answer (see the module's docstring).

    The times are kept by one watch per process, not a timer per call: almost every
    ``receive()`` and ``send()`` returns without waiting (the body has arrived, the socket
    takes the answer), and arming and disarming a timer for each (``asyncio.timeout``) cost
    16 µs of a small POST's 110-190 µs of server CPU (4 µs this way). Each call is noted
    with its deadline while it runs; a timer runs only while some call is noted, every
    ``tick_s``, and cancels the task of each call past its deadline, as
    ``asyncio.timeout`` would (``Task.cancel``, then ``Task.uncancel`` where the call
    ends). So a time is kept to within ``tick_s``: a tenth of the shorter time, at most a
    second."""

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
        self.tick_s = min(1.0, body_timeout_s / 10, send_timeout_s / 10)
        self._waiting: dict[_Wait, None] = {}  # the calls under way (a dict keeps order)
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the timer's

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        timed = _Timed(self, scope, receive, send, asyncio.get_running_loop())
        try:
            try:
                await self.app(scope, timed.receive, timed.send)
            except* SendTimedOut:  # a streaming answer's task group may wrap it
                pass
        except asyncio.CancelledError:
            # The server cancels what still runs when its shutdown's grace period is over
            # (a long-poll, an upload still coming); unanswered, it says a bare
            # text/plain 500. A 503 problem says try again. (It stays a cancellation.)
            if not timed.started:
                await timed.answer_stopping()
            raise
        if timed.stalled:  # raised to here, or caught by the app (a replay ends quietly)
            logger.warning(
                "a client took no byte of its answer to %s %s for %g s; closing its connection",
                scope["method"],
                scope["path"],
                self.send_timeout_s,
            )

    def watch(self, limit_s: float, loop: asyncio.AbstractEventLoop) -> _Wait:
        """Note the call under way in the current task of ``loop`` (the running one: the
        caller knows it; Python 3.11 asks the kernel for its process id each time it
        looks the running loop up)."""
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("an ASGI call outside a task")
        wait = _Wait(task, loop.time() + limit_s)
        self._waiting[wait] = None
        if self._timer is None or self._loop is not loop:  # none, or on a loop now gone
            self._loop = loop
            self._timer = loop.call_later(self.tick_s, self._check, loop)
        return wait

    def unwatch(self, wait: _Wait) -> None:
        self._waiting.pop(wait, None)

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        for wait in [w for w in self._waiting if w.deadline <= now]:
            del self._waiting[wait]
            wait.expired = True
            wait.task.cancel()
        self._timer = loop.call_later(self.tick_s, self._check, loop) if self._waiting else None


class _Wait:
    """One ``receive()`` or ``send()`` under way: its task, and when it runs out."""

    __slots__ = ("deadline", "expired", "task")

    def __init__(self, task: asyncio.Task[object], deadline: float) -> None:
        self.task = task
        self.deadline = deadline
        self.expired = False

    def timed_out(self) -> bool:
        """After a ``CancelledError`` reached the call: whether it was this watch's, and
        not also anyone else's (then it goes on as a cancellation)."""
        return self.expired and self.task.uncancel() == 0


class _Timed:
    __slots__ = (
        "_asked",
        "_has_body",
        "_lingers",
        "_loop",
        "_receive",
        "_scope",
        "_send",
        "_stalled",
        "_started",
        "_timed_out",
        "_timeouts",
    )

    def __init__(
        self,
        timeouts: Timeouts,
        scope: Scope,
        receive: Receive,
        send: Send,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._timeouts = timeouts
        self._loop = loop
        self._scope = scope
        self._receive = receive
        self._send = send
        self._has_body = True  # until a message says the body is complete
        self._stalled = False  # a send timed out: the client is not reading
        self._lingers = False  # answered before its body was read: linger, then close
        self._timed_out = False  # the body stopped arriving: nothing to linger for
        self._started = False  # the answer's head went out
        self._asked = False  # the app read the body: a client waiting for 100 Continue got it

    @property
    def stalled(self) -> bool:
        return self._stalled

    @property
    def started(self) -> bool:
        return self._started

    async def answer_stopping(self) -> None:
        """A 503 problem, and the connection closed after it: the service is stopping."""
        body = _STOPPING
        headers = [
            (b"content-type", b"application/problem+json"),
            (b"content-length", b"%d" % len(body)),
            (b"retry-after", b"1"),
            (b"connection", b"close"),
        ]
        with contextlib.suppress(Exception):  # the client may be gone too
            await self._send({"type": "http.response.start", "status": 503, "headers": headers})
            await self._send({"type": "http.response.body", "body": body})

    async def receive(self) -> Message:
        if not self._has_body:
            return await self._receive()  # the client leaving, whenever it does
        self._asked = True  # uvicorn answers an Expect: 100-continue as the body is read
        timeouts = self._timeouts
        wait = timeouts.watch(timeouts.body_timeout_s, self._loop)
        try:
            message = await self._receive()
        except asyncio.CancelledError:
            if wait.timed_out():
                self._timed_out = True
                raise BodyTimeout(
                    f"no byte of the request body arrived for {timeouts.body_timeout_s:g} s"
                ) from None
            raise
        finally:
            timeouts.unwatch(wait)
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
        if message["type"] == "http.response.start":
            self._started = True

    def _closing(self, start: Message) -> Message:
        """``start``, saying ``Connection: close`` when the request has a body not read
        to its end (and lingering for it unless the client still waits for ``100
        Continue``, never sent as the body was not read, or its body stopped arriving)."""
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
        self._lingers = not ((expects and not self._asked) or self._timed_out)
        headers = [*start.get("headers", []), (b"connection", b"close")]
        return {**start, "headers": headers}

    async def _drain(self) -> None:
        """Read and drop what comes of the body, within the linger's bounds. (A refused
        request's path, so ``asyncio.timeout`` rather than the process's watch.)"""
        linger = self._timeouts.linger
        left = linger.max_bytes
        try:
            async with asyncio.timeout(linger.max_s):
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
        timeouts = self._timeouts
        wait = timeouts.watch(timeouts.send_timeout_s, self._loop)
        try:
            await self._send(message)
        except asyncio.CancelledError:
            if wait.timed_out():
                self._stalled = True
                raise SendTimedOut from None
            raise
        finally:
            timeouts.unwatch(wait)
