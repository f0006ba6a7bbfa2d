"""The scheduler's reads take Causeway-Min-Position and wait for their read models to
show it. The wait came first, as a dependency of the route: a request with a malformed
parameter (a limit of 0, a ``since`` that is no time, a queue name no route can have)
was held for CAUSEWAY_READ_WAIT_MS and told 503 "try again shortly", and a client that
retried as told was held again, for ever. The route checks its parameters first now."""

from __future__ import annotations

import base64
import time

import orjson
import pytest
from fastapi import FastAPI

from app.settings import Settings
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.scheduler.conftest import Client

AHEAD = {"Causeway-Min-Position": "1000000"}  # not reached yet
WAIT_S = 30.0


def cursor(value: object) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).decode()


@pytest.fixture
def settings(request: pytest.FixtureRequest) -> Settings:
    # A wait far past any answer's time on a loaded machine: a request held for it
    # stands out, one answered at once never comes near it.
    wait_s = getattr(request, "param", WAIT_S)
    return Settings(_env_file=None, read_wait_ms=int(wait_s * 1000))


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/dead-letters?limit=0", 422),
        ("/dead-letters?class=sometimes", 422),
        ("/dead-letters?after=not-a-cursor", 400),
        ("/dead-letters?after=no%20cursor", 422),
        ("/dead-letters?since=yesterday", 400),
        ("/queues/Not%20a%20queue/autoscale", 422),
        # Ids no route can have (POST /routes refuses them): none found, at once.
        ("/routes/Not%20a%20route", 404),
        ("/routes/%00", 404),
        # A cursor whose task id holds a NUL: PostgreSQL refused it, after the wait.
        (f"/dead-letters?after={cursor(['2026-01-01T00:00:00+00:00', 'a' + chr(0)])}", 400),
    ],
)
async def test_a_malformed_read_that_names_a_position_is_refused_at_once(
    app: FastAPI, make_key: MakeKey, path: str, status: int
) -> None:
    async with asgi_client(app, await make_key("acme", "admin")) as client:
        start = time.monotonic()
        response = await client.get(path, headers=AHEAD)
        took = time.monotonic() - start
    assert response.status_code == status, (round(took, 2), response.text)
    assert took < WAIT_S / 3  # not held for CAUSEWAY_READ_WAIT_MS first
    assert response.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize("settings", [0.2], indirect=True)
@pytest.mark.parametrize("path", ["/dead-letters?limit=5", "/queues/q1/autoscale", "/queues"])
async def test_a_well_formed_read_that_names_a_position_still_waits_for_it(
    app: FastAPI, make_key: MakeKey, path: str
) -> None:
    """The wait is still there, only later: 0.2 s of it, then 503 with Retry-After."""
    async with asgi_client(app, await make_key("acme", "read")) as client:
        response = await client.get(path, headers=AHEAD)
    assert response.status_code == 503, response.text
    assert "Retry-After" in response.headers


@pytest.mark.parametrize(
    "given",
    [
        {"2026-01-01T00:00:00+00:00": 0, "x": 0},  # an object of two members: its keys
        ["2026-01-01T00:00:00", "a" * 32],  # no offset: _cursor always writes one
        ["2026-01-01T00:00:00+00:00", 7],  # no task id
    ],
)
async def test_a_cursor_the_endpoint_never_gave_is_a_bad_request(
    admin: Client, given: object
) -> None:
    answer = await admin.get("/dead-letters", params={"after": cursor(given)})
    assert answer.status_code == 400, answer.text
    assert answer.json()["detail"].startswith("after: not a cursor this endpoint gave")
