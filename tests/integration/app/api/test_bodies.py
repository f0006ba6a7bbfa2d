"""Every request body is capped at CAUSEWAY_MAX_REQUEST_BYTES, read no further than that,
and refused with a payload-too-large problem, whether or not the caller has a key."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from typing import Any

import pytest
from fastapi import FastAPI

from app.settings import Settings
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import BATCH, dumps, event

CAP = 4096


@pytest.fixture
def settings() -> Settings:
    # No lingering close: the rest of a refused body is never read (app.web.timeouts
    # reads at most linger_bytes of it, tested against a real server in test_server_limits).
    return Settings(_env_file=None, max_request_bytes=CAP, linger_bytes=0)


def oversized() -> bytes:
    return b'{"name": "' + b"a" * (4 * CAP) + b'"}'


def streamed(body: bytes, read: list[int]) -> AsyncIterator[bytes]:
    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 1024):
            read.append(start)
            yield body[start : start + 1024]

    return chunks()


@pytest.mark.parametrize("path", ["/routes", "/models/m/versions"])
@pytest.mark.parametrize("keyed", [False, True], ids=["no key", "admin key"])
@pytest.mark.parametrize("declared", [True, False], ids=["declared", "streamed"])
async def test_a_body_past_the_cap_is_a_413_before_it_is_read(
    app: FastAPI, make_key: MakeKey, path: str, keyed: bool, declared: bool
) -> None:
    """A route's body parameter is read before its dependencies run: the cap is what keeps
    a caller from making the service hold a body of any size (one without a key is
    answered 401 before the body is read, unless it declared a size past the cap)."""
    key = await make_key("acme", "admin") if keyed else "none"
    body, read = oversized(), list[int]()
    async with asgi_client(app, key) as client:
        response = await client.post(
            path,
            content=body if declared else streamed(body, read),
            headers={"Content-Type": "application/json"},
        )
    if not declared:
        assert len(read) < len(range(0, len(body), 1024)), "the rest of the body was read"
    if not (keyed or declared):
        # Of a size it does not declare, the key is checked before any of it is read.
        assert response.status_code == 401, response.text
        return
    assert response.status_code == 413, response.text
    problem = response.json()
    assert problem["type"] == "/problems/payload-too-large"
    assert (problem["limit"], problem["max_bytes"]) == ("max_request_bytes", CAP)


async def test_a_body_under_the_cap_still_meets_the_key_check(app: FastAPI) -> None:
    async with asgi_client(app, "none") as client:
        response = await client.post("/routes", json={"name": "small"})
    assert response.status_code == 401
    assert response.json()["type"] == "/problems/unauthenticated"


async def test_requests_without_a_body_are_untouched(app: FastAPI, make_key: MakeKey) -> None:
    """GET, HEAD and OPTIONS routes take no body: whatever length one declares, nothing
    reads it, and the request is answered as if it had none."""
    async with asgi_client(app, await make_key("acme", "read")) as client:
        assert (await client.get("/healthz")).status_code == 200
        declared = {"Content-Length": str(4 * CAP)}
        assert (await client.get("/replay", headers=declared)).status_code == 200


async def call(
    app: FastAPI,
    method: str,
    path: str,
    key: str,
    chunks: list[bytes],
    send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    *,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """``app`` called as uvicorn calls it (ASGI spec 2.3: a streaming response listens for
    the client leaving by reading on), with a body sent in ``chunks``."""
    pending: list[dict[str, Any]] = [
        {"type": "http.request", "body": chunk, "more_body": True} for chunk in chunks
    ]
    pending.append({"type": "http.request", "body": b"", "more_body": False})

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop(0)
        await asyncio.Event().wait()  # the client stays
        raise AssertionError("unreachable")

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"c"), (b"authorization", f"Bearer {key}".encode()), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("c", 80),
    }
    await app(scope, receive, send)


async def test_a_streaming_answer_is_not_cut_by_a_body_nobody_asked_for(
    app: FastAPI, make_key: MakeKey
) -> None:
    """A replay reads on while it streams, to hear the client leave: a body sent with the
    GET, past the cap, is thrown away, and the replay still streams in full."""
    key = await make_key("acme", "ingest,read")
    async with asgi_client(app, key) as client:
        stored = await client.post(
            "/events", content=dumps([event() for _ in range(3)]), headers=BATCH
        )
        assert stored.status_code == 201
    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await call(app, "GET", "/replay", key, [b"x" * 1000] * 10, send)
    assert sent[0]["status"] == 200
    body = b"".join(m.get("body", b"") for m in sent[1:])
    assert len(body.splitlines()) == 3


async def test_a_direct_graphql_answer_is_sent_once_even_if_sending_fails(
    app: FastAPI, make_key: MakeKey
) -> None:
    """POST /graphql skips FastAPI's stack; a failure once the answer has started (a
    client gone mid-send) goes to the server, as FastAPI's stack sends it, and no second
    answer follows the first."""
    key = await make_key("acme", "read")
    started: list[int] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            started.append(message["status"])
        else:
            raise OSError("connection reset by peer")

    query = dumps({"query": "{ __typename }"})
    json_type = [(b"content-type", b"application/json")]
    with pytest.raises(OSError, match="connection reset"):
        await call(app, "POST", "/graphql", key, [query], send, headers=json_type)
    assert started == [200]


async def test_a_content_length_of_digits_int_refuses_is_no_server_error(
    app: FastAPI,
) -> None:
    """ "²" is a digit to str.isdigit() and not to int(): the length is ignored, the body is
    read under the cap, and the request answered."""
    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"content-length", "²".encode("latin-1"))]
    await call(app, "POST", "/routes", "none", [b'{"name": "x"}'], send, headers=headers)
    assert sent[0]["status"] == 401


@pytest.mark.parametrize("path", ["/routes", "/events"])
async def test_a_content_length_of_thousands_of_digits_is_no_server_error(
    app: FastAPI, path: str
) -> None:
    """HTTP parsers take leading zeros, and int() refuses thousands of digits: such a length
    is read for what it says (2), and one with thousands of significant digits is past
    any cap (refused before the key is looked at, POST /events as every route)."""
    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    for declared, status in [(b"0" * 5000 + b"2", 401), (b"9" * 5000, 413)]:
        sent.clear()
        headers = [(b"content-type", b"application/json"), (b"content-length", declared)]
        await call(app, "POST", path, "none", [b"{}"], send, headers=headers)
        assert sent[0]["status"] == status


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/models/m/versions", '{"version": "1", "signature": {"inputs": [], "outputs": []},'
         ' "tags": {"\\ud800": "x"}}'),
        ("/models/m/versions", '{"version": "1", "signature": {"inputs": [{"name": "\\ud800",'
         ' "type": "binary"}], "outputs": []}}'),
        ("/routes", '{"id": "r1", "types": ["a\\ud800"], "kind": "k", "queue": "q"}'),
        ("/queues/q/lease", '{"worker": "w", "labels": {"a": "\\ud800"}, "wait_s": 0}'),
    ],
)  # fmt: skip
async def test_a_lone_surrogate_in_a_json_body_is_a_bad_body(
    app: FastAPI, make_key: MakeKey, path: str, body: str
) -> None:
    """JSON may escape half of a UTF-16 pair, which no UTF-8 text can hold: the body is
    refused as it is read, as JSON that is not text (as orjson refuses it on POST /events),
    not with a 500 when the store encodes it."""
    async with asgi_client(app, await make_key("acme", "admin")) as admin:
        response = await admin.post(
            path, content=body.encode(), headers={"Content-Type": "application/json"}
        )
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "/problems/invalid-json"
    assert "surrogate" in response.text


async def test_an_escaped_surrogate_pair_is_text(app: FastAPI, make_key: MakeKey) -> None:
    body = '{"version": "1", "signature": {"inputs": [], "outputs": []}, "tags": {"k": "\\ud83d\\ude00"}}'
    async with asgi_client(app, await make_key("acme", "admin")) as admin:
        response = await admin.post(
            "/models/m/versions",
            content=body.encode(),
            headers={"Content-Type": "application/json"},
        )
    assert response.status_code == 201, response.text  # a lone half of it is not
