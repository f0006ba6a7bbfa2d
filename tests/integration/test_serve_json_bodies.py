"""The JSON routes (models, deployments, routes, leases, dead letters, task failures)
check the caller's key, and their body's declared size, before they read the body (a
real serve on loopback, raw HTTP/1.1). FastAPI reads a route's body before it runs its
dependencies, and only ``JSONRequest.json`` checked them (from a review): a caller with
no key was told ``100 Continue`` and made to upload, or, having sent the head only,
waited out the body timeout for a 408, where ``POST /events``, GraphQL and the
completions answer 401 at once; a body declared past CAUSEWAY_MAX_JSON_BODY_BYTES was
read whole before its 413."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from secrets import token_hex

import pytest
from sqlalchemy import URL

from tests.conftest import janitor
from tests.integration.process import create_key, environment, serving

MAX_REQUEST_BYTES = 16 << 20
MAX_JSON_BODY_BYTES = 1024
BODY_TIMEOUT_S = 10  # far from what a 401 takes on a loaded machine


@pytest.fixture(scope="module")
def served(server: URL, template_db: str) -> Iterator[tuple[int, str]]:
    name = f"causeway_json_bodies_{token_hex(4)}"
    with janitor(server, name, template_dbname=template_db):
        url = server.set(database=name).render_as_string(hide_password=False)
        env = environment(
            CAUSEWAY_DATABASE_URL=url,
            CAUSEWAY_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
            CAUSEWAY_MAX_REQUEST_BYTES=str(MAX_REQUEST_BYTES),
            CAUSEWAY_MAX_JSON_BODY_BYTES=str(MAX_JSON_BODY_BYTES),
            CAUSEWAY_RUN_PROJECTIONS="false",
            CAUSEWAY_RUN_SCHEDULER="false",
        )
        key = create_key(env, "acme", "admin,ingest,read,worker")
        with serving(env) as base:
            yield int(base.rsplit(":", 1)[1]), key


JSON_ROUTES = [
    ("POST", "/routes"),
    ("POST", "/models/m/versions"),
    ("PUT", "/models/m/aliases/a"),
    ("POST", "/deployments/svc/rollouts"),
    ("POST", "/queues/q/lease"),
    ("POST", "/dead-letters/requeue"),
    ("POST", "/tasks/fail"),
]
# The routes that read their bodies themselves (they checked the key first already).
KEY_FIRST_ROUTES = [("POST", "/events"), ("POST", "/graphql"), ("POST", "/tasks/complete")]


def _first_line(port: int, head: str, wait_s: float) -> tuple[bytes, float]:
    """Send ``head`` (and no body); the first line the server answers, and when."""
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.settimeout(wait_s)
        started = time.monotonic()
        conn.sendall(head.encode())
        data = b""
        try:
            while b"\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
        except TimeoutError:
            pass
        return data.split(b"\r\n", 1)[0], time.monotonic() - started


def _head(method: str, path: str, length: int, extra: str = "") -> str:
    return (
        f"{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {length}\r\n{extra}\r\n"
    )


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES + KEY_FIRST_ROUTES)
def test_a_caller_without_a_key_is_not_told_100_continue(
    served: tuple[int, str], method: str, path: str
) -> None:
    """curl, .NET and Java send a large upload with ``Expect: 100-continue``; a caller
    whose key is missing should get its 401 instead of being invited to upload."""
    port, _ = served
    line, _ = _first_line(port, _head(method, path, 1 << 20, "expect: 100-continue\r\n"), wait_s=5)
    assert line.startswith(b"HTTP/1.1 401"), f"{method} {path} without a key answered {line!r}"


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES + KEY_FIRST_ROUTES)
def test_a_caller_without_a_key_gets_401_before_sending_its_body(
    served: tuple[int, str], method: str, path: str
) -> None:
    """docs/deployment.md: 'a 401 before the body was read'. A caller without a key that
    has sent only the head of a 1 MiB upload waits out the body timeout and gets a 408."""
    port, _ = served
    line, took = _first_line(port, _head(method, path, 1 << 20), wait_s=BODY_TIMEOUT_S + 5)
    assert line.startswith(b"HTTP/1.1 401"), (
        f"{method} {path} without a key answered {line!r} after {took:.1f} s"
    )
    assert took < BODY_TIMEOUT_S / 2


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
def test_a_body_declared_over_the_json_cap_is_refused_before_it_is_sent(
    served: tuple[int, str], method: str, path: str
) -> None:
    """A body declared at 1 MiB on a route capped at CAUSEWAY_MAX_JSON_BODY_BYTES (1 KiB
    here): the server tells the client to send it (100 Continue) and reads all of it
    before its 413, as GraphQL does not ('refused before it is read')."""
    port, key = served
    line, _ = _first_line(
        port,
        _head(method, path, 1 << 20, f"authorization: Bearer {key}\r\nexpect: 100-continue\r\n"),
        wait_s=5,
    )
    assert line.startswith(b"HTTP/1.1 413"), f"{method} {path} answered {line!r}"
