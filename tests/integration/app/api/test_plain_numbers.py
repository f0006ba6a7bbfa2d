"""Positions and counts in the URL are ASCII digits alone, as GraphQL and the watch's
``Last-Event-ID`` read them. REST read them as pydantic's lax int does (``1_0`` is 10,
``+2`` is 2, `` 2 `` is 2, ``2.0`` is 2): a client that built a URL from a value it
mangled ("1_000" from a formatter, "+5", "5.0" from a float) got an answer about another
position, and a replay resumed with ``after=1_0`` silently skipped events, where it now
gets a 422 problem."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

import httpx2
import pytest
from fastapi import FastAPI

from tests.integration.conftest import MakeKey
from tests.integration.events import BATCH, dumps, event


@pytest.fixture
async def stored(client: httpx2.AsyncClient) -> None:
    posted = await client.post(
        "/events", content=dumps([event(stream="s") for _ in range(5)]), headers=BATCH
    )
    assert posted.status_code == 201, posted.text


@pytest.mark.parametrize(
    ("path", "params", "headers"),
    [
        ("/replay", {"after": "1_0"}, {}),
        ("/replay", {"after": "+2"}, {}),
        ("/replay", {"after": " 2 "}, {}),
        ("/replay", {"after": "2.0"}, {}),
        ("/replay", {"limit": "0_2"}, {}),
        ("/streams/s", {"from_version": "+2"}, {}),
        ("/streams/s", {"limit": "0_2"}, {}),
        ("/events/" + "x", {"min_position": "0_1"}, {}),
        ("/streams/s", {}, {"Causeway-Min-Position": "+1"}),
    ],
    ids=[
        "replay-after-underscore",
        "replay-after-plus",
        "replay-after-spaces",
        "replay-after-float",
        "replay-limit-underscore",
        "streams-from_version-plus",
        "streams-limit-underscore",
        "events-min_position-underscore",
        "streams-min-position-header-plus",
    ],
)
async def test_a_position_that_is_not_plain_digits_is_refused(
    client: httpx2.AsyncClient,
    stored: None,
    path: str,
    params: dict[str, str],
    headers: dict[str, str],
) -> None:
    response = await client.get(path, params=params, headers=headers)
    assert response.status_code == 422, (response.status_code, response.text[:200])
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_the_watch_refuses_an_after_that_last_event_id_would_refuse(
    app: FastAPI, make_key: MakeKey
) -> None:
    """The watch refuses ``Last-Event-ID: 1_0`` (400: "not a position this stream sent"),
    and ``?after=1_0`` too: it was read as 10, and every change at positions 1-10 was
    silently never sent."""
    key = await make_key("acme", "read")
    refused = await first_answer(app, key, "after=0", [(b"last-event-id", b"1_0")])
    assert refused[0] == 400
    status, body = await first_answer(app, key, "after=1_0", [])
    assert status == 422, (status, body)


async def first_answer(
    app: FastAPI, key: str, query: str, headers: list[tuple[bytes, bytes]]
) -> tuple[int, bytes]:
    """The status and first body message of ``GET /deployments/gate/watch?query``; then
    the client leaves."""
    sent: list[MutableMapping[str, Any]] = []
    first_body = asyncio.Event()
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await first_body.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body":
            first_body.set()

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": "/deployments/gate/watch",
        "raw_path": b"/deployments/gate/watch", "query_string": query.encode(),
        "root_path": "", "client": ("127.0.0.1", 1), "server": ("causeway", 80),
        "headers": [(b"host", b"causeway"), (b"authorization", f"Bearer {key}".encode()), *headers],
    }  # fmt: skip
    async with asyncio.timeout(10):
        await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = next((m["body"] for m in sent if m["type"] == "http.response.body"), b"")
    return status, body
