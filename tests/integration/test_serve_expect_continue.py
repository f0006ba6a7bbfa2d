"""A body still coming after its answer is read and dropped within CAUSEWAY_LINGER_BYTES
and CAUSEWAY_LINGER_S, so that "a client that finishes sending within the bounds reads
its answer" (docs/deployment.md, app/web/timeouts.py).

``Timeouts`` skipped the lingering for any request that said ``Expect: 100-continue``, on
the ground that such a client "has sent no body". That holds only until the app reads
the body: uvicorn answers ``100 Continue`` at the first ``receive()``, and the client then
sends its body. A chunked body over the cap, refused part-way (413), had its connection
closed at once with the client's bytes unread, and the client still sending got a reset
(curl, .NET and Java clients send chunked uploads with ``Expect: 100-continue``); the same
request without the header was lingered for and finished sending.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from secrets import token_hex

import pytest
from sqlalchemy import URL

from tests.conftest import janitor
from tests.integration.process import create_key, environment, serving

MAX_REQUEST_BYTES = 64 * 1024
BODY_BYTES = 16 << 20  # within the default linger bound (32 MiB, 5 s)


@pytest.fixture(scope="module")
def served(server: URL, template_db: str) -> Iterator[tuple[int, str]]:
    name = f"causeway_expect_{token_hex(4)}"
    with janitor(server, name, template_dbname=template_db):
        url = server.set(database=name).render_as_string(hide_password=False)
        env = environment(
            CAUSEWAY_DATABASE_URL=url,
            CAUSEWAY_MAX_REQUEST_BYTES=str(MAX_REQUEST_BYTES),
            CAUSEWAY_RUN_PROJECTIONS="false",
            CAUSEWAY_RUN_SCHEDULER="false",
        )
        key = create_key(env, "acme", "ingest,read")
        with serving(env) as base:
            yield int(base.rsplit(":", 1)[1]), key


def _chunked_upload(port: int, key: str, *, expect: bool) -> tuple[OSError | None, bytes]:
    """A chunked POST /events of BODY_BYTES, sent whole before the answer is read (after
    ``100 Continue`` when it asks for it): the send's error, if any, and the answer."""
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.settimeout(10)
        head = (
            f"POST /events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n"
            "content-type: application/cloudevents+json\r\ntransfer-encoding: chunked\r\n"
        )
        if expect:
            head += "expect: 100-continue\r\n"
        conn.sendall(head.encode() + b"\r\n")
        if expect:
            assert conn.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
        error = None
        piece = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
        try:
            for _ in range(BODY_BYTES // 0x10000):
                conn.sendall(piece)
            conn.sendall(b"0\r\n\r\n")
        except OSError as exc:
            error = exc
        answer = b""
        try:
            while chunk := conn.recv(65536):
                answer += chunk
        except OSError:
            pass
    return error, answer


def test_without_expect_the_refused_chunked_body_is_lingered_for(
    served: tuple[int, str],
) -> None:
    port, key = served
    error, answer = _chunked_upload(port, key, expect=False)
    assert error is None
    assert answer.startswith(b"HTTP/1.1 413 ")


def test_after_100_continue_the_refused_chunked_body_is_lingered_for_too(
    served: tuple[int, str],
) -> None:
    port, key = served
    error, answer = _chunked_upload(port, key, expect=True)
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert error is None, (
        f"the client, told 100 Continue, was reset while sending its body: {error!r}"
    )
