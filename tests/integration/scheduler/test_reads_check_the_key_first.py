"""The scheduler's reads take Causeway-Min-Position (read-your-writes), and wait for the
read models to show it (``settled_on_primary``). The key is checked first: a request with
no key, an unknown key or a key without the scope is refused at once (401, 403). It was
held for CAUSEWAY_READ_WAIT_MS and answered 503 "try again shortly": a client with a
wrong key was told to retry for ever, and anyone could hold requests open without one."""

from __future__ import annotations

import time

import pytest
from fastapi import FastAPI

from app.settings import Settings
from tests.integration.conftest import MakeKey, asgi_client

AHEAD = {"Causeway-Min-Position": "1000000"}  # not reached yet
UNKNOWN = "cw_000000000000_" + "a" * 43
WAIT_S = 30.0


@pytest.fixture
def settings() -> Settings:
    # A wait far past any answer's time on a loaded machine: a request held for it
    # stands out, one answered at once never comes near it.
    return Settings(_env_file=None, read_wait_ms=int(WAIT_S * 1000))


@pytest.mark.parametrize(
    "path", ["/queues", "/metrics", "/dead-letters", "/tasks/" + "a" * 32, "/routes"]
)
@pytest.mark.parametrize("who", ["no key", "unknown key"])
async def test_a_read_that_names_a_position_still_needs_a_key_first(
    app: FastAPI, path: str, who: str
) -> None:
    async with asgi_client(app, UNKNOWN) as client:
        if who == "no key":
            del client.headers["Authorization"]
        start = time.monotonic()
        response = await client.get(path, headers=AHEAD)
        took = time.monotonic() - start
    assert response.status_code == 401, (round(took, 2), response.text)
    assert took < WAIT_S / 3  # not held for CAUSEWAY_READ_WAIT_MS
    assert response.json()["type"] == "/problems/unauthenticated"


async def test_a_read_key_asking_for_the_routes_is_forbidden_not_told_to_retry(
    app: FastAPI, make_key: MakeKey
) -> None:
    async with asgi_client(app, await make_key("acme", "read")) as client:
        response = await client.get("/routes", headers=AHEAD)
    assert response.status_code == 403, response.text
