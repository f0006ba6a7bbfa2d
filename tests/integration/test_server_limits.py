"""What a client of a real ``causeway serve`` sees when it breaks the server's limits: a
head too large or too slow, a body that stops arriving or is over the cap; and that
keep-alive and pipelining still work. Granian gives the head's limits, the app the body's
(``app.web.timeouts``); docs/deployment.md says which is whose."""

from __future__ import annotations

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

MAX_HEAD_BYTES = 16 * 1024
MAX_REQUEST_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def served(server: URL, template_db: str) -> Iterator[tuple[int, str]]:
    """One ``causeway serve`` with short timeouts and small caps; its port and a key."""
    name = f"causeway_limits_{token_hex(4)}"
    with janitor(server, name, template_dbname=template_db):
        url = server.set(database=name).render_as_string(hide_password=False)
        env = environment(
            CAUSEWAY_DATABASE_URL=url,
            CAUSEWAY_MAX_HEAD_BYTES=str(MAX_HEAD_BYTES),
            CAUSEWAY_HEAD_TIMEOUT_S="1",
            CAUSEWAY_BODY_TIMEOUT_S="1",
            CAUSEWAY_MAX_REQUEST_BYTES=str(MAX_REQUEST_BYTES),
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
    def test_a_head_well_over_the_cap_is_431_and_closed(self, served: tuple[int, str]) -> None:
        port, _ = served
        with connect(port) as conn:
            big = b"x-big: " + b"a" * (8 * MAX_HEAD_BYTES) + b"\r\n"
            conn.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n" + big + b"\r\n")
            answer, _ = read_all(conn)
        assert answer.startswith(b"HTTP/1.1 431 ")

    def test_a_head_under_the_cap_is_served(self, served: tuple[int, str]) -> None:
        port, _ = served
        with connect(port) as conn:
            header = b"x-big: " + b"a" * (MAX_HEAD_BYTES // 2) + b"\r\n"
            conn.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n" + header)
            conn.sendall(b"\r\n")
            answer, _ = read_all(conn)
        assert answer.startswith(b"HTTP/1.1 200 ")

    def test_a_head_that_stops_arriving_is_closed_after_the_head_timeout(
        self, served: tuple[int, str]
    ) -> None:
        port, _ = served
        with connect(port) as conn:
            started = time.monotonic()
            conn.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
            answer, closed = read_all(conn)
        assert answer == b""
        assert 0.9 < closed - started < 5


class TestBody:
    def test_a_body_that_stops_arriving_is_a_408_problem(self, served: tuple[int, str]) -> None:
        port, key = served
        with connect(port) as conn:
            started = time.monotonic()
            conn.sendall(post(key, b'{"specversion":', length=200))
            answer, closed = read_all(conn)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 ")
        assert b"application/problem+json" in head
        assert orjson.loads(body)["type"] == "/problems/body-timeout"
        assert 0.9 < closed - started < 5

    def test_a_body_over_the_cap_is_a_413_problem_while_the_client_still_sends(
        self, served: tuple[int, str]
    ) -> None:
        port, key = served
        with connect(port) as conn:
            conn.sendall(post(key, b"x" * (8 * MAX_REQUEST_BYTES)))
            head = conn.recv(65536)
        assert head.startswith(b"HTTP/1.1 413 ")
        assert b"application/problem+json" in head


class TestConnection:
    def test_keep_alive_and_pipelined_requests_are_answered_in_order(
        self, served: tuple[int, str]
    ) -> None:
        port, key = served
        first, second = event(subject="k"), event(subject="k")
        with connect(port) as conn:
            conn.sendall(post(key, orjson.dumps(first)) + post(key, orjson.dumps(second)))
            data = b""
            while data.count(b"HTTP/1.1 201 ") < 2:
                data += conn.recv(65536)
            conn.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            rest, _ = read_all(conn)
        assert data.index(first["id"].encode()) < data.index(second["id"].encode())
        assert rest.startswith(b"HTTP/1.1 200 ")
