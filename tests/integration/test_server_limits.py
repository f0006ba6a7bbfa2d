"""What a client of a real ``causeway serve`` sees when it breaks the app's limits: a body
that stops arriving or is over the cap; and that large heads, keep-alive and pipelining
still work. The body's limits are the app's (``app.web.timeouts``, ``app.web.bodies``);
the head's are the proxy's in front (docs/deployment.md): uvicorn gives none."""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Iterator
from secrets import token_hex

import orjson
import pytest
from sqlalchemy import URL

from tests.conftest import janitor
from tests.integration.events import event
from tests.integration.process import create_key, environment, serving

MAX_REQUEST_BYTES = 64 * 1024
LINGER_BYTES = 16 << 20
LINGER_S = 2


@pytest.fixture(scope="module")
def served(server: URL, template_db: str) -> Iterator[tuple[int, str]]:
    """One ``causeway serve`` with short timeouts and small caps; its port and a key."""
    name = f"causeway_limits_{token_hex(4)}"
    with janitor(server, name, template_dbname=template_db):
        url = server.set(database=name).render_as_string(hide_password=False)
        env = environment(
            CAUSEWAY_DATABASE_URL=url,
            CAUSEWAY_BODY_TIMEOUT_S="1",
            CAUSEWAY_MAX_REQUEST_BYTES=str(MAX_REQUEST_BYTES),
            CAUSEWAY_LINGER_BYTES=str(LINGER_BYTES),
            CAUSEWAY_LINGER_S=str(LINGER_S),
            CAUSEWAY_RUN_PROJECTIONS="false",
            CAUSEWAY_RUN_SCHEDULER="false",
        )
        key = create_key(env, "acme", "ingest,read")
        with serving(env) as base:
            yield int(base.rsplit(":", 1)[1]), key


def connect(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port))
    conn.settimeout(10)
    return conn


def read_all(conn: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when it closed."""
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data, time.monotonic()


def post(key: str, body: bytes, length: int | None = None) -> bytes:
    return (
        f"POST /events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n"
        f"content-type: application/cloudevents+json\r\n"
        f"content-length: {len(body) if length is None else length}\r\n\r\n"
    ).encode() + body


class TestHead:
    def test_a_head_of_32_kib_is_served(self, served: tuple[int, str]) -> None:
        port, _ = served
        with connect(port) as conn:
            header = b"x-big: " + b"a" * (32 * 1024) + b"\r\n"
            conn.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n" + header)
            conn.sendall(b"\r\n")
            answer, _ = read_all(conn)
        assert answer.startswith(b"HTTP/1.1 200 ")


class TestBody:
    def test_a_body_that_stops_arriving_is_a_408_problem(self, served: tuple[int, str]) -> None:
        port, key = served
        with connect(port) as conn:
            started = time.monotonic()
            conn.sendall(post(key, b'{"specversion":', length=200))
            answer = conn.recv(65536)
            answered = time.monotonic()
            while b"\r\n\r\n" not in answer:
                answer += conn.recv(65536)
        head, _, _ = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 ")
        assert b"application/problem+json" in head
        assert 0.9 < answered - started < 5

    def test_a_body_declared_over_the_cap_is_a_413_problem_before_it_arrives(
        self, served: tuple[int, str]
    ) -> None:
        port, key = served
        with connect(port) as conn:
            # Only the head and a first piece: the answer must not wait for the rest.
            conn.sendall(post(key, b"x" * 1024, length=8 * MAX_REQUEST_BYTES))
            head = conn.recv(65536)
        assert head.startswith(b"HTTP/1.1 413 ")
        assert b"application/problem+json" in head


class TestLingeringClose:
    """After answering a body it did not read to its end, the server reads at most
    LINGER_BYTES more of it, for at most LINGER_S, then closes."""

    def test_the_rest_of_a_huge_refused_body_is_not_read(self, served: tuple[int, str]) -> None:
        port, key = served
        chunk = b"x" * (1 << 16)
        sent = 0
        with connect(port) as conn:  # kept alive: no Connection: close from the client
            conn.sendall(post(key, chunk, length=10 << 30))  # 10 GiB declared
            head = conn.recv(65536)
            started = time.monotonic()
            closed = False
            try:
                while sent < 512 << 20 and time.monotonic() - started < 30:
                    conn.sendall(chunk)
                    sent += len(chunk)
            except OSError:  # the server closed: a reset, or a broken pipe
                closed = True
        assert closed, f"the server read {sent} bytes and kept the connection"
        assert head.startswith(b"HTTP/1.1 413 ")
        assert b"connection: close" in head.lower()
        # What was read, plus what socket buffers on both sides held.
        assert sent < LINGER_BYTES + (32 << 20)
        assert time.monotonic() - started < LINGER_S + 5

    def test_a_client_still_sending_with_connection_close_gets_its_413(
        self, served: tuple[int, str]
    ) -> None:
        port, key = served
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request(  # a plain sendall of the whole body, then the answer is read
                "POST",
                "/events",
                body=b"x" * (8 << 20),
                headers={
                    "Authorization": f"Bearer {key}",
                    "Content-Type": "application/cloudevents+json",
                    "Connection": "close",
                },
            )
            answer = conn.getresponse()
            assert answer.status == 413
            assert answer.headers["content-type"] == "application/problem+json"
            assert orjson.loads(answer.read())["type"] == "/problems/payload-too-large"
        finally:
            conn.close()

    def test_a_client_waiting_for_100_continue_is_answered_and_closed(
        self, served: tuple[int, str]
    ) -> None:
        port, key = served
        with connect(port) as conn:
            request = post(key, b"", length=10 << 30)
            conn.sendall(request.replace(b"\r\n\r\n", b"\r\nexpect: 100-continue\r\n\r\n", 1))
            answer, _ = read_all(conn)
        assert answer.startswith(b"HTTP/1.1 413 ")
        assert b"100 Continue" not in answer


class TestConnection:
    def test_keep_alive_and_pipelined_requests_are_answered_in_order(
        self, served: tuple[int, str]
    ) -> None:
        port, key = served
        first, second = event(subject="k"), event(subject="k")
        with connect(port) as conn:
            conn.sendall(post(key, orjson.dumps(first)) + post(key, orjson.dumps(second)))
            data = b""
            while second["id"].encode() not in data:
                data += conn.recv(65536)
            conn.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            rest, _ = read_all(conn)
        assert data.index(first["id"].encode()) < data.index(second["id"].encode())
        assert rest.startswith(b"HTTP/1.1 200 ")
