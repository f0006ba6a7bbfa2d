"""Requests still running when ``causeway serve`` is stopped and its grace period
(CAUSEWAY_SHUTDOWN_TIMEOUT_S) runs out: each is answered 503 problem+json with
Retry-After, never the server's own text/plain 500 (a real serve, raw sockets)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import orjson
from sqlalchemy import URL

from tests.integration.process import create_key, environment, free_port


@contextmanager
def serve(
    env: dict[str, str], log: Path, *args: str
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    with log.open("ab") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(port), *args],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            assert time.monotonic() < deadline, "serve did not answer in time"
            time.sleep(0.2)
        yield process, port
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def _env(database_url: URL, tmp_path: Path, **more: str) -> dict[str, str]:
    return environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
        **more,
    )


def _head_and_body(answer: bytes) -> tuple[str, bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.decode("latin-1"), body


def _read_answer(conn: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := conn.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def _request_in_flight_at_sigterm(
    database_url: URL, tmp_path: Path, request: bytes, trickle: bytes | None = None
) -> tuple[bytes, float]:
    """``request`` sent on a raw connection to a serve with a 2 s shutdown timeout,
    SIGTERM a second later; what the connection got and how long the process took."""
    env = _env(
        database_url, tmp_path, CAUSEWAY_SHUTDOWN_TIMEOUT_S="2", CAUSEWAY_BODY_TIMEOUT_S="30"
    )
    key = create_key(env, "acme", "admin")
    with serve(env, tmp_path / "serve.log") as (process, port):
        conn = socket.create_connection(("127.0.0.1", port))
        conn.settimeout(30)
        stop = threading.Event()

        def keep_trickling() -> None:  # a slow upload, each byte well within the body timeout
            while trickle and not stop.wait(0.5):
                try:
                    conn.sendall(trickle)
                except OSError:
                    return

        try:
            conn.sendall(request.replace(b"KEY", key.encode()))
            trickler = threading.Thread(target=keep_trickling, daemon=True)
            trickler.start()
            time.sleep(1)
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            answer = _read_answer(conn)
            process.wait(30)
            return answer, time.monotonic() - signalled
        finally:
            stop.set()
            conn.close()


def test_a_long_poll_lease_open_at_sigterm_is_not_answered_with_a_bare_500(
    database_url: URL, tmp_path: Path
) -> None:
    """A worker long-polls ``POST /queues/{q}/lease`` (``wait_s`` 20, within the 30 s the
    service allows by default) when the service is stopped: once the grace period runs
    out, the request was cancelled and uvicorn answered a text/plain 500."""
    body = orjson.dumps({"worker": "w-1", "wait_s": 20})
    request = (
        b"POST /queues/gpu/lease HTTP/1.1\r\nhost: x\r\nauthorization: Bearer KEY\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
    ) + body
    answer, took_s = _request_in_flight_at_sigterm(database_url, tmp_path, request)
    head, _ = _head_and_body(answer)
    assert not head.startswith("HTTP/1.1 500"), f"after {took_s:.1f} s: {answer!r}"
    assert head.startswith("HTTP/1.1 503"), f"after {took_s:.1f} s: {answer!r}"
    assert "application/problem+json" in head.lower()
    assert "retry-after: 1" in head.lower()


def test_an_upload_still_arriving_at_sigterm_is_not_answered_with_a_bare_500(
    database_url: URL, tmp_path: Path
) -> None:
    """A producer uploads a batch slowly but steadily (a byte every half second, well
    within CAUSEWAY_BODY_TIMEOUT_S) when the service is stopped: nothing was appended,
    so a 503 problem with Retry-After, not a text/plain 500."""
    request = (
        b"POST /events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer KEY\r\n"
        b"content-type: application/cloudevents-batch+json\r\ncontent-length: 100000\r\n\r\n["
    )
    answer, took_s = _request_in_flight_at_sigterm(database_url, tmp_path, request, trickle=b" ")
    head, _ = _head_and_body(answer)
    assert head.startswith("HTTP/1.1 503"), f"after {took_s:.1f} s: {answer!r}"
    assert "application/problem+json" in head.lower()
