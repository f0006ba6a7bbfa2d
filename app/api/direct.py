"""Requests answered without ASGI: what an app that takes some of them whole from the
connection implements (``DirectRoutes``), and what the connection keeps of one while
it is answered. ``app.api.wire`` is the connection; the module docstring there says
which requests go this way and why."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

Headers = Sequence[tuple[bytes, bytes]]
# Writes a direct request's answer: its status, its headers and its whole body. Called
# once, from any callback of the connection's event loop.
Respond = Callable[[int, Headers, bytes], None]
# Takes a direct request's headers (names in lower case, as ASGI has them) and its body,
# and answers through ``Respond``, now or later; it never raises.
DirectHandler = Callable[[list[tuple[bytes, bytes]], bytes, Respond], None]


@runtime_checkable
class DirectRoutes(Protocol):
    """An app that answers some requests without ASGI (see the module's docstring)."""

    def direct_handler(self, method: bytes, url: bytes, length: int) -> DirectHandler | None:
        """The handler of a request with this method, URL (as sent: path and query) and
        ``Content-Length``, or None to have it go through ASGI."""
        ...


def direct_routes_of(app: Any) -> DirectRoutes | None:
    """The ``DirectRoutes`` app that uvicorn serves as ``app``, under the wrappers it adds
    (``ProxyHeadersMiddleware``, its message logger), each of which keeps the app it wraps
    as ``app``. A direct request has no use for theirs: they read and rewrite the ASGI
    scope, which it does not have."""
    for _ in range(4):
        if isinstance(app, DirectRoutes):
            return app
        app = getattr(app, "app", None)
    return None


class _NoWaiters:
    """An event nobody waits on: uvicorn sets its cycle's when the client leaves."""

    def set(self) -> None:
        return None


_NO_WAITERS = _NoWaiters()


class DirectCycle:
    """A direct request being answered, as uvicorn's protocol reads its request cycle
    (``self.cycle``): whether its answer is complete (a request pipelined behind it waits
    until it is), whether the connection ends after it (a graceful shutdown sets
    ``keep_alive``), and whether the client left. Nothing waits on ``message_event``."""

    __slots__ = ("disconnected", "keep_alive", "response_complete", "response_started")

    waiting_for_100_continue = False
    message_event = _NO_WAITERS

    def __init__(self, keep_alive: bool) -> None:
        self.keep_alive = keep_alive
        self.response_started = False
        self.response_complete = False
        self.disconnected = False


class DirectRequest:
    """A direct request whose body is being read: its handler, cycle, headers and body."""

    __slots__ = ("body", "cycle", "handler", "headers")

    def __init__(
        self, handler: DirectHandler, cycle: DirectCycle, headers: list[tuple[bytes, bytes]]
    ) -> None:
        self.handler = handler
        self.cycle = cycle
        self.headers = headers
        self.body: list[bytes] = []
