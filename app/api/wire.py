"""The HTTP/1.1 connections ``causeway serve`` accepts: uvicorn's httptools protocol, with
caps on the request head and its own refusals as problems.

httptools reads a request line and headers of any size and for any time: uvicorn appends
each piece of the URL to the last (``bytes +=``, quadratic) and keeps every header, and
httptools itself keeps an unfinished header name or value, calling nothing, however long
it grows. So one client sending a URL or a header without end held a growing share of the
server's memory and of its only event loop, and a head sent a byte at a time held a
connection for ever. Here, before the app sees a request:

- a head over ``MAX_HEAD_BYTES`` (what the callbacks hand over, separators counted, or the
  reads that arrive while one header is still unfinished) or with over ``MAX_HEADERS``
  headers is refused with a 431 problem;
- a head not complete ``HEAD_TIMEOUT_S`` after the first read that did not finish it (or
  after the connection opened, for its first request) is refused with a 408 problem;
- a body that stops arriving for ``BODY_TIMEOUT_S`` (while the server reads it: a body
  the app does not read yet is not the client's delay) is refused with a 408 problem too,
  once the app has not answered yet (else the connection just closes); the app's request
  ends as if the client had left;
- what httptools cannot parse is a 400 problem rather than uvicorn's plain text;
- a client that takes no byte of its answer for ``SEND_TIMEOUT_S`` while the server has
  more to send (uvicorn holds the app's next write until the client takes some) loses
  the connection, and the app's request ends as if the client had left: a replay whose
  reader stopped reading gives back its slot and its database connection (with the
  snapshot its cursor holds) instead of keeping them for as long as the socket stays
  open. Like nginx's ``send_timeout``, the time runs between two bytes taken, not over
  the whole answer, so a slow reader that keeps reading is served to the end.

Each refusal ends the connection the way nginx does (a lingering close): the answer, then
the end of the server's side, and what the client still sends read and dropped for up to
``LINGER_S`` before the socket closes, so that a client that is still sending gets the
answer instead of a reset. A chunked body's trailers are dropped: uvicorn added
them to the request's headers after the app had read those, and no ASGI app sees them.
Bodies are capped where they are read (``app.web.bodies``).

An answer's head and body leave in one write (``Coalescing``): uvicorn writes them one
after the other, which cost a send and a wake-up of the client each.

The server speaks no WebSocket (``ws="none"``: the GraphQL schema has nothing to subscribe
to), so a request asking to upgrade is answered as the plain HTTP request it also is, which
RFC 9110 (7.8) allows, and its errors are problems like any other's; uvicorn's websocket
protocol refused upgrades to paths without a websocket route with an empty text/plain 403.
httptools stops parsing at the end of such a request's head, so its answer ends the
connection, and one that has a body is refused with a 400 problem: its body would have
been lost, and the request run without it.

Some requests are answered without ASGI (``DirectRoutes``): the app names, by method,
URL and declared length, the ones it takes whole from the connection, and the connection
hands over the headers and the body once it has read them, and writes the answer the app
gives back. uvicorn's request cycle (the ASGI scope, a task, the receive and send
messages) cost more CPU than appending one event does, on the path every producer takes.
Only a plain request goes this way: its body framed by ``Content-Length``, no ``Expect``
or upgrade, no request before it still unanswered, no access log, root path or
concurrency limit to keep; every other request goes through ASGI as before. Its answer is written as
uvicorn writes one (the same status line and default headers, ``connection: close`` when
the connection ends with it), and then the connection goes on as after any answer:
requests pipelined behind it start, or the keep-alive timer runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import sys
import termios
from functools import partial
from http import HTTPStatus
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from app.api._coalescing import Coalescing
from app.api.direct import (
    DirectCycle,
    DirectHandler,
    DirectRequest,
    Headers,
    direct_routes_of,
)
from app.errors import AppError, BadRequest, BodyTimeout, HeadTimeout, HeadTooLarge
from app.web.problems import MEDIA_TYPE

MAX_HEAD_BYTES = 64 * 1024  # nginx allows 32 KiB by default
MAX_HEADERS = 256  # Apache allows 100 by default
HEAD_TIMEOUT_S = 30.0  # nginx waits 60 s by default
BODY_TIMEOUT_S = 30.0  # between two reads of a body; nginx's client_body_timeout is 60 s
SEND_TIMEOUT_S = 60.0  # a client taking no byte of its answer; nginx's send_timeout is 60 s
LINGER_S = 2.0  # nginx lingers up to 30 s, 5 s without input
_SEPARATORS = 4  # ": " and CRLF of a header line

logger = logging.getLogger(__name__)
# The ioctl that tells a socket's unsent bytes (Linux); elsewhere only the transport's.
_OUTQ: int | None = getattr(termios, "TIOCOUTQ", None)


def _send_poll_s() -> float:
    return min(1.0, SEND_TIMEOUT_S / 10)


class _HeadOverCap(Exception):
    """Raised from a parser callback: httptools stops, and uvicorn answers through
    ``send_400_response``."""


class CappedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = False
        self._head_bytes = 0  # what the callbacks handed over
        self._unparsed_bytes = 0  # reads that neither began nor finished the head
        self._headers_seen = 0
        self._refusal: AppError | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        self._in_body = False
        self._body_read_at = 0.0  # the loop's time of the last read within a body
        self._body_timer: asyncio.TimerHandle | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        self._unsent = 0  # what the client had yet to take when the send timer last looked
        self._taken_at = 0.0  # the loop's time when the client was last seen taking some
        self._lingering = False
        # A concurrency limit is counted in uvicorn's tasks, which direct requests are not;
        # uvicorn's request cycle writes the access log's lines; and under a root path the
        # app's routes answer (the app names direct requests by the path they arrive by).
        plain = self.limit_concurrency is None and not self.config.access_log and not self.root_path
        self._direct_routes = direct_routes_of(self.app) if plain else None
        self._reading: DirectRequest | None = None  # the direct request whose body comes
        self._idle_since: float | None = None  # the loop's time of the last answer, if idle
        self._rendered: tuple[list[tuple[bytes, bytes]], bytes] = ([], b"")  # _default_head

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # The answers' writes go through Coalescing; flow control stays on the socket's.
        self.transport = self._coalescing = Coalescing(transport, self.loop)
        self._arm()  # a connection that never sends a whole head does not stay

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._disarm_body()
        self._disarm_send()
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        """uvicorn's, with one keep-alive timer a connection: uvicorn armed a new timer
        after every answer and cancelled it at the next request's first read. Here the
        connection notes when it fell idle, and its timer, armed once, looks at that."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._idle_since = self.loop.time()
        if self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_at(
                self._idle_since + self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

    def _unset_keepalive_if_required(self) -> None:
        """uvicorn calls this as a request's bytes arrive: the connection is busy now."""
        self._idle_since = None

    def timeout_keep_alive_handler(self) -> None:
        self.timeout_keep_alive_task = None
        idle_since = self._idle_since
        if idle_since is None:
            return  # busy: the answer it is on arms the timer again
        due = idle_since + self.timeout_keep_alive
        if self.loop.time() < due:  # it was busy, and fell idle again since
            self.timeout_keep_alive_task = self.loop.call_at(due, self.timeout_keep_alive_handler)
            return
        super().timeout_keep_alive_handler()

    def pause_writing(self) -> None:
        """The transport holds more than its high-water mark of answer: uvicorn now keeps
        the app's next write waiting until the client takes some."""
        super().pause_writing()
        if self._send_timer is None:
            self._unsent = self._unsent_bytes()
            self._taken_at = self.loop.time()
            self._send_timer = self.loop.call_later(_send_poll_s(), self._send_check)

    def resume_writing(self) -> None:
        self._disarm_send()
        super().resume_writing()

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # refused: what the client still sends is dropped until the close
        continuing = self._in_head
        super().data_received(data)
        # httptools keeps an unfinished header to itself: a read that arrives within a
        # head and does not finish it is head, every byte of it.
        if continuing and self._in_head and not self.transport.is_closing():
            self._unparsed_bytes += len(data)
            if self._unparsed_bytes > MAX_HEAD_BYTES:
                self._refuse(self._too_large())
        # A head that one read did not finish gets a timer; most come whole in one read, and
        # take no timer at all.
        if self._in_head and self._head_timer is None and not self.transport.is_closing():
            self._arm()
        # Likewise a body that one read did not finish: one timer while it lasts, which
        # looks at the time of the last read when it fires.
        if self._in_body and not self.transport.is_closing():
            self._body_read_at = self.loop.time()
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(BODY_TIMEOUT_S, self._body_check)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = self._unparsed_bytes = self._headers_seen = 0

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._in_head:
            return  # a trailer of a chunked body
        self._headers_seen += 1
        self._count(len(name) + len(value) + _SEPARATORS)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm()
        # A request is on its way: no keep-alive timer runs under it (a direct answer
        # written at once arms one, and a request pipelined behind it may be in this read).
        self._unset_keepalive_if_required()
        handler = self._direct_handler()
        if handler is None:
            super().on_headers_complete()
        else:
            keep_alive = self.parser.get_http_version() != "1.0" and self.parser.should_keep_alive()
            cycle = DirectCycle(keep_alive)
            self.cycle = cycle  # type: ignore[assignment]  # read by uvicorn as its own cycle
            self._reading = DirectRequest(handler, cycle, self.headers)
        self._in_body = True  # until on_message_complete, in this read or a later one

    def on_body(self, body: bytes) -> None:
        if self._reading is None:
            super().on_body(body)
        else:  # no more than its Content-Length, which its handler accepted
            self._reading.body.append(body)

    def on_message_complete(self) -> None:
        self._in_body = False
        self._disarm_body()
        request, self._reading = self._reading, None
        if request is None:
            super().on_message_complete()
        else:
            respond = partial(self._respond, request.cycle)
            request.handler(request.headers, b"".join(request.body), respond)

    def _default_head(self) -> bytes:
        """uvicorn's default headers (date, server) as an answer's head carries them,
        made again only when the server replaces their list (its clock does, each
        second)."""
        headers = self.server_state.default_headers
        if self._rendered[0] is not headers:
            self._rendered = (headers, b"".join(b"%s: %s\r\n" % pair for pair in headers))
        return self._rendered[1]

    def _direct_handler(self) -> DirectHandler | None:
        """The handler of the request whose head just ended, if it is answered directly."""
        routes = self._direct_routes
        cycle: Any = self.cycle  # None before the connection's first request
        if (
            routes is None
            or self.expect_100_continue
            or (cycle is not None and not cycle.response_complete)  # uvicorn queues it
            or self.parser.should_upgrade()
        ):
            return None
        length = None
        for name, value in self.headers:
            # As many digits as a length can have: int() refuses thousands of them.
            if (
                name == b"content-length"
                and length is None
                and value.isdigit()
                and len(value) <= 18
            ):
                length = int(value)
            elif name in (b"content-length", b"transfer-encoding"):
                return None  # framed otherwise, or ambiguously: uvicorn's way decides
        if length is None:
            return None
        return routes.direct_handler(self.parser.get_method(), self.url, length)

    def _respond(self, cycle: DirectCycle, status: int, headers: Headers, body: bytes) -> None:
        """Write a direct request's answer, as uvicorn writes an app's, and go on."""
        if cycle.response_complete:
            return
        cycle.response_started = cycle.response_complete = True
        if not cycle.disconnected and not self.transport.is_closing():
            content = [STATUS_LINE[status], self._default_head()]
            for name, value in headers:
                content += [name, b": ", value, b"\r\n"]
            if not cycle.keep_alive:
                content.append(b"connection: close\r\n")
            content += [b"\r\n", body]
            self._coalescing.write_whole(b"".join(content))
            if not cycle.keep_alive:
                self.transport.close()
        self.on_response_complete()

    def _unsupported_upgrade_warning(self) -> None:
        """A request asked to upgrade the connection, which this server does not do (uvicorn's
        own warning here blamed a missing WebSocket library). httptools parses nothing after
        its head: one without a body is answered as HTTP, and the answer closes the
        connection; one with a body, which nothing could read, is refused."""
        cycle = self.cycle  # httptools raises the upgrade once the head is complete
        if not any(
            name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0")
            for name, value in self.headers
        ):
            cycle.keep_alive = False
            return
        # The app's request ends as if the client had left, before it has read anything.
        cycle.disconnected = True
        cycle.message_event.set()
        self._refuse(
            BadRequest(
                "this server does not upgrade connections, so a request with a body must not "
                "ask to: send it without 'Connection: upgrade'"
            )
        )

    def send_400_response(self, msg: str) -> None:  # noqa: ARG002  (uvicorn's fixed text)
        refusal, self._refusal = self._refusal, None
        self._refuse(refusal or BadRequest("the request is not valid HTTP/1.x"))

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD_BYTES or self._headers_seen > MAX_HEADERS:
            self._refusal = self._too_large()
            raise _HeadOverCap

    @staticmethod
    def _too_large() -> HeadTooLarge:
        return HeadTooLarge(
            f"the request line and headers are over {MAX_HEAD_BYTES} bytes, "
            f"or over {MAX_HEADERS} headers"
        )

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _disarm_body(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _disarm_send(self) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _send_check(self) -> None:
        self._send_timer = None
        # Closing counts too: a close waits to send what is left (the last part of an
        # answer without keep-alive, or at a graceful shutdown) for as long as it takes.
        if not self.flow.write_paused:
            return
        # Looked at often, so that what a client's kernel still takes just after the pause
        # does not restart its whole time: it runs from the last byte it took.
        now, unsent = self.loop.time(), self._unsent_bytes()
        if unsent < self._unsent:
            self._unsent, self._taken_at = unsent, now
        if now - self._taken_at < SEND_TIMEOUT_S:
            self._send_timer = self.loop.call_later(_send_poll_s(), self._send_check)
            return
        logger.warning(
            "a client took no byte of its answer for %g s; closing its connection",
            SEND_TIMEOUT_S,
        )
        # Aborted, not closed: a close waits to send what this client will not take.
        # connection_lost follows, and ends the app's request as a disconnect.
        self.transport.abort()

    def _unsent_bytes(self) -> int:
        """What the client has yet to take: the transport's buffer, and the kernel's
        send queue under it (which a reader with a small window drains a few KiB at a
        time, while the transport writes to the kernel only once much of it is free)."""
        unsent = self.transport.get_write_buffer_size()
        sock = self.transport.get_extra_info("socket")
        if _OUTQ is not None and sock is not None:
            with contextlib.suppress(OSError):
                queued = fcntl.ioctl(sock.fileno(), _OUTQ, b"\0\0\0\0")
                unsent += int.from_bytes(queued, sys.byteorder, signed=True)
        return unsent

    def _body_check(self) -> None:
        self._body_timer = None
        if not self._in_body or self.transport.is_closing():
            return
        cycle = self.cycle
        if self.flow.read_paused or cycle.waiting_for_100_continue:
            # The server is the one late: reading is paused (the app has not taken what
            # came, or a pipelined request waits its turn), or a client that sent
            # ``Expect: 100-continue`` waits for the app to ask for the body. Look again
            # in a second, and count the client's time from then.
            self._body_read_at = self.loop.time()
            self._body_timer = self.loop.call_later(min(1.0, BODY_TIMEOUT_S), self._body_check)
            return
        waited = self.loop.time() - self._body_read_at
        if waited < BODY_TIMEOUT_S:
            self._body_timer = self.loop.call_later(BODY_TIMEOUT_S - waited, self._body_check)
            return
        # The app's request ends as if the client had left: its reads answer
        # http.disconnect, and what it sends goes nowhere.
        answered = cycle.response_started
        cycle.disconnected = True
        cycle.message_event.set()
        if answered:
            logger.warning("a request body stopped arriving; closing its connection")
            self.transport.close()
            return
        self._refuse(BodyTimeout(f"no byte of the request body arrived for {BODY_TIMEOUT_S:.0f} s"))

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self._refuse(
                HeadTimeout(f"the request head did not arrive within {HEAD_TIMEOUT_S:.0f} s")
            )

    def _refuse(self, refusal: AppError) -> None:
        """Answer ``refusal`` as a problem and close the connection."""
        self._disarm()
        self._disarm_body()
        if refusal.status != 400:
            logger.warning("%s: %s", refusal.code, refusal.detail)
        body = orjson.dumps(
            {
                "type": f"/problems/{refusal.code}",
                "title": refusal.title,
                "status": refusal.status,
                "detail": refusal.detail,
            }
        )
        phrase = HTTPStatus(refusal.status).phrase
        head = [f"HTTP/1.1 {refusal.status} {phrase}\r\n".encode()]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            f"content-type: {MEDIA_TYPE}\r\n".encode(),
            f"content-length: {len(body)}\r\n".encode(),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self._lingering = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)


# What ``causeway serve`` hands uvicorn: this protocol, and no WebSocket.
SERVER_PROTOCOLS: dict[str, Any] = {"http": CappedHttpToolsProtocol, "ws": "none"}
