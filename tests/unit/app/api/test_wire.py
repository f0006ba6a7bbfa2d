"""The connection protocol ``causeway serve`` runs, under uvicorn, with a bare ASGI app:
what reaches the app, and how a head past its caps is refused."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
import uvicorn
from starlette.responses import StreamingResponse
from uvicorn.server import ServerState

from app.api import wire
from app.api._coalescing import Coalescing
from app.api.direct import DirectHandler, Respond
from tests.in_process import serving

seen: list[list[tuple[bytes, bytes]]] = []  # the headers of each request read to its end
streams: list[str] = []  # how each /stream answer ended: "whole" or "disconnected"
CHUNK = b"x" * 65_536


async def stream(scope: dict[str, Any], receive: Any, send: Any, chunks: int) -> None:
    """``chunks`` of 64 KiB (0: without end) as Starlette streams them, which stops when
    the client is gone."""
    finished = False

    async def parts() -> AsyncIterator[bytes]:
        nonlocal finished
        sent = 0
        while chunks == 0 or sent < chunks:
            yield CHUNK
            sent += 1
            # As an app that reads what it sends would: uvicorn's send returns at once once
            # the client is gone, and a loop that never waits would never see it go.
            await asyncio.sleep(0)
        finished = True

    await StreamingResponse(parts())(scope, receive, send)
    streams.append("whole" if finished else "disconnected")


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/stream":
        await stream(scope, receive, send, int(scope["query_string"] or 0))
        return
    delay = dict(scope["headers"]).get(b"x-delay-s")
    if delay:  # the app's own work before it reads the body (a key check, say)
        await asyncio.sleep(float(delay))
    while (message := await receive())["type"] != "http.disconnect":
        if not message.get("more_body"):
            break
    else:
        return  # the client left, or the server ended the request as if it had
    seen.append(list(scope["headers"]))
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
async def port(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[int]:
    monkeypatch.setattr(wire, "HEAD_TIMEOUT_S", 0.5)
    monkeypatch.setattr(wire, "BODY_TIMEOUT_S", 0.5)
    monkeypatch.setattr(wire, "SEND_TIMEOUT_S", 1.0)
    async with serving(app) as free:
        seen.clear()
        streams.clear()
        yield free


async def exchange(port: int, *pieces: bytes, pause_s: float = 0.0) -> tuple[int, bytes]:
    """Send ``pieces`` (each its own write), and read the first answer to the end."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(pause_s)
    except ConnectionError:
        pass  # the server refused and closed before everything was sent
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def problem_type(body: bytes) -> str:
    return str(orjson.loads(body)["type"])


async def test_one_endless_header_value_is_refused_past_the_cap(port: int) -> None:
    # httptools keeps an unfinished header value to itself, calling nothing.
    start = b"GET / HTTP/1.1\r\nhost: x\r\nx-endless: "
    status, body = await exchange(port, start, *[b"v" * 16_384] * 64)
    assert (status, problem_type(body)) == (431, "/problems/head-too-large")


async def test_tiny_headers_count_their_separators_and_their_number(port: int) -> None:
    many = b"GET / HTTP/1.1\r\nhost: x\r\n" + b"a:b\r\n" * 300 + b"\r\n"
    assert (await exchange(port, many))[0] == 431
    enough = b"GET / HTTP/1.1\r\nhost: x\r\n" + b"a:b\r\n" * 200 + b"connection: close\r\n\r\n"
    assert await exchange(port, enough) == (200, b"ok")


async def test_a_head_that_comes_too_slowly_is_refused(port: int) -> None:
    status, body = await exchange(port, b"GET / HTTP/1.1\r\n", b"host: x\r\n", pause_s=0.4)
    assert (status, problem_type(body)) == (408, "/problems/head-timeout")


async def test_a_body_that_stops_arriving_is_refused(port: int) -> None:
    head = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n"
    status, body = await exchange(port, head + b"partial", b"", pause_s=0.8)
    assert (status, problem_type(body)) == (408, "/problems/body-timeout")


async def test_a_body_that_comes_slowly_but_steadily_reaches_the_app(port: int) -> None:
    head = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 8\r\nconnection: close\r\n\r\n"
    assert await exchange(port, head, *[b"ab"] * 4, pause_s=0.3) == (200, b"ok")


async def test_a_client_waiting_for_100_continue_is_not_late(port: int) -> None:
    """uvicorn sends the 100 when the app first reads the body: until then the client,
    waiting for it, sends nothing, and the server is the one late."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nexpect: 100-continue\r\n"
        b"x-delay-s: 1.2\r\nconnection: close\r\n\r\n"
    )
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    writer.write(b"hello")
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert interim.startswith(b"HTTP/1.1 100")
    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.endswith(b"ok")


async def test_a_connection_that_sends_nothing_is_closed(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert answer.split()[1] == b"408"


async def test_a_head_split_across_reads_within_the_cap_reaches_the_app(port: int) -> None:
    head = (
        b"GET / HTTP/1.1\r\nhost: x\r\nx-big: " + b"v" * 40_000 + b"\r\nconnection: close\r\n\r\n"
    )
    pieces = [head[i : i + 1000] for i in range(0, len(head), 1000)]
    assert await exchange(port, *pieces) == (200, b"ok")


async def test_a_keep_alive_connection_counts_each_head_afresh(port: int) -> None:
    one = b"GET / HTTP/1.1\r\nhost: x\r\nx-pad: " + b"v" * 40_000 + b"\r\n\r\n"
    last = one.replace(b"host: x\r\n", b"host: x\r\nconnection: close\r\n")
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(one + one + last)
    answers = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert answers.count(b"HTTP/1.1 200 OK") == 3


async def test_trailers_of_a_chunked_body_never_join_the_headers(port: int) -> None:
    request = (
        b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        b"2\r\nhi\r\n0\r\nx-trailer: t\r\n\r\n"
    )
    assert await exchange(port, request) == (200, b"ok")
    assert (b"x-trailer", b"t") not in seen[-1]


async def test_what_is_not_http_is_a_400_problem(port: int) -> None:
    status, body = await exchange(port, b"NOT HTTP AT ALL\r\n\r\n")
    assert (status, problem_type(body)) == (400, "/problems/bad-request")


UPGRADE = b"connection: upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\n"


async def test_an_upgrade_without_a_body_is_answered_as_http_and_ends_the_connection(
    port: int,
) -> None:
    # No WebSocket here: the request is answered as the HTTP request it also is. httptools
    # parses nothing after it, so a request pipelined behind it is not left waiting.
    asking = b"GET / HTTP/1.1\r\nhost: x\r\n" + UPGRADE + b"\r\n"
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(asking + b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
    answers = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert answers.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"connection: close\r\n" in answers.lower()
    assert answers.endswith(b"\r\n\r\nok")
    assert len(seen) == 1


async def test_an_upgrade_with_a_body_is_refused_before_the_app_reads_it(port: int) -> None:
    # httptools takes what follows the head as the upgraded protocol's: the app would have
    # read an empty body.
    for framing, body in [
        (b"content-length: 5\r\n", b"hello"),
        (b"transfer-encoding: chunked\r\n", b"5\r\nhello\r\n0\r\n\r\n"),
    ]:
        asking = b"POST / HTTP/1.1\r\nhost: x\r\n" + UPGRADE + framing + b"\r\n"
        status, answer = await exchange(port, asking, body, pause_s=0.05)
        assert (status, problem_type(answer)) == (400, "/problems/bad-request")
        assert "Connection: upgrade" in orjson.loads(answer)["detail"]
    await asyncio.sleep(0.1)
    assert seen == []  # each request ended as if its client had left, its body unread


async def reading(port: int, path: bytes) -> socket.socket:
    """A connection that asked for ``path`` and whose window is a few KiB: what the
    client does not read soon fills the server's buffers."""
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.setblocking(False)
    await asyncio.get_running_loop().sock_connect(client, ("127.0.0.1", port))
    client.sendall(b"GET " + path + b" HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    return client


async def ended(timeout_s: float = 10) -> str:
    async with asyncio.timeout(timeout_s):
        while not streams:
            await asyncio.sleep(0.05)
    return streams[0]


async def test_a_client_that_stops_reading_its_answer_loses_the_connection(port: int) -> None:
    """The app's answer has no end, the client reads none of it: past the send timeout
    the server drops the connection, and the app's request ends as a disconnect."""
    client = await reading(port, b"/stream")
    loop = asyncio.get_running_loop()
    try:
        assert await ended() == "disconnected"
        # What the server's kernel still held comes, then the end (or a reset).
        with contextlib.suppress(ConnectionResetError):
            async with asyncio.timeout(10):
                while await loop.sock_recv(client, 1 << 20):
                    pass
    finally:
        client.close()


async def test_a_client_that_reads_slowly_but_steadily_gets_the_whole_answer(port: int) -> None:
    """Pauses of 0.3 s between reads, past the server's buffers: each look of the send
    timer (every second here) finds that the client took something."""
    chunks = (
        256  # 16 MiB, more than the socket buffers hold (3 MB on the machine it was written on)
    )
    client = await reading(port, b"/stream?" + str(chunks).encode())
    loop = asyncio.get_running_loop()
    received = bytearray()
    try:
        await asyncio.sleep(0.3)  # the buffers fill, and the server waits on the client
        for _ in range(10):
            received += await loop.sock_recv(client, 65_536)
            await asyncio.sleep(0.3)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)  # now the rest, fast
        async with asyncio.timeout(10):
            while data := await loop.sock_recv(client, 1 << 20):
                received += data
    finally:
        client.close()
    assert await ended() == "whole"
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert dechunked(body) == CHUNK * chunks


def dechunked(body: bytes) -> bytes:
    """An HTTP/1.1 chunked body, whole (it must end with its last chunk)."""
    parts: list[bytes] = []
    at = 0
    while True:
        end = body.index(b"\r\n", at)
        size = int(body[at:end], 16)
        if size == 0:
            return b"".join(parts)
        parts.append(body[end + 2 : end + 2 + size])
        at = end + 2 + size + 2


class Recording(asyncio.Transport):
    """A socket's transport that records each write, as the segments it would send."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8000)}.get(
            name, default
        )

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class TestCoalescing:
    async def test_the_servers_protocol_sends_each_answer_in_one_write(self) -> None:
        """Two pipelined requests through the protocol ``causeway serve`` runs: each answer,
        head and body, is one write to the socket."""
        config = uvicorn.Config(app, log_level="error", **wire.SERVER_PROTOCOLS)
        config.load()
        protocol = wire.CappedHttpToolsProtocol(
            config=config, server_state=ServerState(), app_state={}
        )
        socket_side = Recording()
        protocol.connection_made(socket_side)
        request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"
        protocol.data_received(request + request)
        async with asyncio.timeout(5):
            while len(socket_side.writes) < 2:
                await asyncio.sleep(0)
        protocol.connection_lost(None)
        assert [write.partition(b"\r\n")[0] for write in socket_side.writes] == [
            b"HTTP/1.1 200 OK",
            b"HTTP/1.1 200 OK",
        ]
        assert all(write.endswith(b"\r\n\r\nok") for write in socket_side.writes)

    async def test_an_answers_head_and_body_go_out_in_one_write(self) -> None:
        socket_side = Recording()
        transport = Coalescing(socket_side, asyncio.get_running_loop())
        transport.write(b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n")
        transport.write(b"ok")
        assert socket_side.writes == [b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok"]
        await asyncio.sleep(0)
        assert len(socket_side.writes) == 1

    async def test_a_head_whose_body_comes_later_goes_at_the_end_of_the_loops_turn(
        self,
    ) -> None:
        socket_side = Recording()
        transport = Coalescing(socket_side, asyncio.get_running_loop())
        transport.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        assert socket_side.writes == []
        await asyncio.sleep(0)
        assert socket_side.writes == [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"]

    async def test_a_large_write_goes_at_once(self) -> None:
        socket_side = Recording()
        transport = Coalescing(socket_side, asyncio.get_running_loop())
        transport.write(CHUNK)
        assert socket_side.writes == [CHUNK]

    async def test_closing_sends_what_is_held_first_and_aborting_drops_it(self) -> None:
        loop = asyncio.get_running_loop()
        head = b"HTTP/1.1 204 No Content\r\n\r\n"
        closed, aborted = Recording(), Recording()
        closing = Coalescing(closed, loop)
        closing.write(head)
        closing.close()
        assert closed.writes == [head]
        assert closed.closed
        aborting = Coalescing(aborted, loop)
        aborting.write(head)
        aborting.abort()
        await asyncio.sleep(0)
        assert aborted.writes == []


class Direct:
    """``app`` above, answering ``POST /direct`` itself (``wire.DirectRoutes``) with the
    body it was sent: at once, or ``x-delay-s`` later."""

    def __init__(self) -> None:
        self.handled: list[bytes] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await app(scope, receive, send)

    def direct_handler(self, method: bytes, url: bytes, length: int) -> DirectHandler | None:
        if method == b"POST" and url == b"/direct" and length <= 100:
            return self.answer
        return None

    def answer(self, headers: list[tuple[bytes, bytes]], body: bytes, respond: Respond) -> None:
        self.handled.append(body)
        echo = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]
        delay = dict(headers).get(b"x-delay-s")
        if delay:
            asyncio.get_running_loop().call_later(float(delay), respond, 201, echo, body)
        else:
            respond(201, echo, body)


def direct(body: bytes, *more: bytes) -> bytes:
    head = b"POST /direct HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n" % len(body)
    return head + b"".join(more) + b"\r\n" + body


CLOSE = b"connection: close\r\n"


async def answers_to(port: int, *requests: bytes) -> list[tuple[bytes, bytes]]:
    """Write ``requests`` in one write; each answer's head and body, to the connection's end."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"".join(requests))
    received = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    found = []
    while received:
        head, _, rest = received.partition(b"\r\n\r\n")
        length = int(
            next(line for line in head.split(b"\r\n") if line.startswith(b"content-length")).split(
                b":"
            )[1]
        )
        found.append((head, rest[:length]))
        received = rest[length:]
    return found


class TestDirectRequests:
    @pytest.fixture
    async def served(self, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Direct, int]]:
        monkeypatch.setattr(wire, "BODY_TIMEOUT_S", 0.5)
        answering = Direct()
        async with serving(answering) as free:
            seen.clear()
            yield answering, free

    async def test_the_handler_answers_and_the_connection_goes_on(
        self, served: tuple[Direct, int]
    ) -> None:
        answering, port = served
        answers = await answers_to(port, direct(b"one"), direct(b"two", CLOSE))
        assert [body for _, body in answers] == [b"one", b"two"]
        first, last = (head.lower() for head, _ in answers)
        assert first.startswith(b"http/1.1 201 created\r\n")
        assert b"\r\nserver: uvicorn" in first  # the default headers, as uvicorn's own
        assert b"\r\ndate: " in first
        assert b"connection: close" not in first
        assert b"connection: close" in last
        assert answering.handled == [b"one", b"two"]
        assert seen == []  # the ASGI app saw neither

    async def test_pipelined_answers_keep_the_order_of_their_requests(
        self, served: tuple[Direct, int]
    ) -> None:
        # The first is answered last. The requests behind it were read while it was still
        # unanswered, so they go through ASGI (as uvicorn queues them), after it.
        answering, port = served
        answers = await answers_to(
            port,
            direct(b"first", b"x-delay-s: 0.3\r\n"),
            b"GET / HTTP/1.1\r\nhost: x\r\n\r\n",
            direct(b"third", CLOSE),
        )
        assert [body for _, body in answers] == [b"first", b"ok", b"ok"]
        assert answering.handled == [b"first"]

    async def test_a_request_framed_otherwise_goes_through_asgi(
        self, served: tuple[Direct, int]
    ) -> None:
        answering, port = served
        chunked = b"POST /direct HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
        answers = await answers_to(
            port,
            chunked + b"2\r\nhi\r\n0\r\n\r\n",
            direct(b"x" * 101),  # past what the app takes directly
            b"POST /direct?q HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n" + CLOSE + b"\r\nhi",
        )
        assert [body for _, body in answers] == [b"ok", b"ok", b"ok"]
        assert answering.handled == []
        assert len(seen) == 3

    async def test_a_length_of_thousands_of_digits_goes_through_asgi(
        self, served: tuple[Direct, int]
    ) -> None:
        # Leading zeros: httptools reads it as 2; int() would refuse the digits.
        long = b"POST /direct HTTP/1.1\r\nhost: x\r\ncontent-length: " + b"0" * 5000 + b"2\r\n"
        [(head, body)] = await answers_to(served[1], long + CLOSE + b"\r\nhi")
        assert (head.split()[1], body, served[0].handled) == (b"200", b"ok", [])

    async def test_under_a_root_path_every_request_goes_through_asgi(self) -> None:
        answering = Direct()
        async with serving(answering, root_path="/api") as port:
            seen.clear()
            [(_, body)] = await answers_to(port, direct(b"hi", CLOSE))
        assert (body, answering.handled) == (b"ok", [])

    async def test_http_1_0_ends_the_connection_after_the_answer(
        self, served: tuple[Direct, int]
    ) -> None:
        request = b"POST /direct HTTP/1.0\r\ncontent-length: 2\r\n\r\nhi"
        [(head, body)] = await answers_to(served[1], request)  # read to the connection's end
        assert (b"connection: close" in head.lower(), body) == (True, b"hi")

    async def test_a_client_gone_before_its_answer_leaves_the_server_serving(
        self, served: tuple[Direct, int]
    ) -> None:
        answering, port = served
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(direct(b"gone", b"x-delay-s: 0.2\r\n"))
        await writer.drain()
        writer.close()
        await asyncio.sleep(0.4)  # its answer came meanwhile, with nobody to take it
        [(_, body)] = await answers_to(port, direct(b"next", CLOSE))
        assert (answering.handled, body) == ([b"gone", b"next"], b"next")

    async def test_a_direct_body_that_stops_arriving_is_refused(
        self, served: tuple[Direct, int]
    ) -> None:
        answering, port = served
        head = b"POST /direct HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n"
        status, body = await exchange(port, head + b"part", b"", pause_s=0.8)
        assert (status, problem_type(body)) == (408, "/problems/body-timeout")
        assert answering.handled == []

    async def test_a_graceful_shutdown_still_writes_the_answer_due_and_then_closes(self) -> None:
        answering = Direct()
        async with serving(answering) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(direct(b"late", b"x-delay-s: 0.3\r\n"))
            await writer.drain()
            await asyncio.sleep(0.05)  # the request is in: the server stops as it waits
        answer = await asyncio.wait_for(reader.read(), 10)  # to the connection's end
        writer.close()
        assert answer.startswith(b"HTTP/1.1 201 Created\r\n")
        assert b"\r\nconnection: close\r\n" in answer
        assert answer.endswith(b"\r\n\r\nlate")


class TestKeepAlive:
    """One keep-alive timer a connection, armed at its first answer: it closes a
    connection idle for the keep-alive time since its last answer, never a busy one."""

    async def test_an_idle_connection_closes_after_the_keep_alive_time(self) -> None:
        async with serving(Direct(), timeout_keep_alive=1) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            loop = asyncio.get_running_loop()
            writer.write(direct(b"one"))
            await asyncio.wait_for(reader.readuntil(b"one"), 5)
            answered = loop.time()
            assert await asyncio.wait_for(reader.read(), 5) == b""  # the server closed it
            writer.close()
        assert 0.9 < loop.time() - answered < 2.5

    async def test_a_connection_busy_when_the_time_is_up_stays_open(self) -> None:
        async with serving(Direct(), timeout_keep_alive=1) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(direct(b"one"))
            await asyncio.wait_for(reader.readuntil(b"one"), 5)
            await asyncio.sleep(0.6)
            # Still being answered when the first answer's second is up, at 1 s.
            writer.write(direct(b"two", b"x-delay-s: 0.8\r\n"))
            await asyncio.wait_for(reader.readuntil(b"two"), 5)
            await asyncio.sleep(0.5)  # 1.9 s after the first answer, 0.5 s after this one
            writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")  # through ASGI this time
            assert (await asyncio.wait_for(reader.readuntil(b"ok"), 5)).startswith(b"HTTP/1.1 200")
            assert await asyncio.wait_for(reader.read(), 5) == b""  # then idle, and closed
            writer.close()
