"""The JSON routes check the key as they read the body (``JSONRequest.body``), inside
FastAPI's reading of it, which turns any error into a 400 "There was an error parsing
the body": a key lookup that met a database away was answered so, where every other
route answers 503 with Retry-After (from a review)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI

from app.db.engine import create_engine
from app.web.auth import Authenticator
from tests.integration.conftest import MakeKey, asgi_client

JSON = {"Content-Type": "application/json"}


@pytest.fixture
async def unreachable_keys(app: FastAPI) -> AsyncIterator[None]:
    """The key store's database stops answering (connection refused): every key lookup
    fails with the driver's OperationalError, as during a database restart."""
    dead = create_engine("postgresql://postgres@127.0.0.1:1/none")
    saved = app.state.authenticator
    app.state.authenticator = Authenticator(dead, ttl_s=0)
    try:
        yield
    finally:
        app.state.authenticator = saved
        await dead.dispose()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/routes", {"id": "r", "types": ["t"], "kind": "k", "queue": "q"}),
        ("POST", "/models/m/versions", {"version": "1"}),
        ("POST", "/queues/q/lease", {"worker": "w"}),
        ("POST", "/dead-letters/requeue", {}),
        ("POST", "/deployments/svc/promote", {}),
    ],
)
async def test_a_json_route_whose_key_lookup_meets_a_database_away_answers_503(
    app: FastAPI,
    make_key: MakeKey,
    unreachable_keys: None,
    method: str,
    path: str,
    body: dict[str, Any],
) -> None:
    """As GET /routes answers it (its key checked by the route's dependency): a 503 with
    Retry-After, where the key checked in FastAPI's reading of the body was a 400 'There
    was an error parsing the body' (a valid body said malformed, and not retried)."""
    async with asgi_client(app, await make_key("acme", "admin")) as client:
        reference = await client.get("/routes")
        answer = await client.request(method, path, json=body, headers=JSON)
    assert reference.status_code == 503, reference.text  # how the service says it elsewhere
    assert answer.status_code == 503, f"{method} {path}: {answer.status_code} {answer.text}"


@pytest.mark.parametrize(
    "path", ["/dead-letters/requeue", "/deployments/svc/promote", "/dead-letters/t/requeue"]
)
async def test_an_optional_body_left_out_while_the_key_lookup_fails_is_a_503_not_a_400(
    app: FastAPI, make_key: MakeKey, unreachable_keys: None, path: str
) -> None:
    """The body is optional on these routes: left out, it was a 503 before the key was
    checked in ``JSONRequest.body``, and a 400 after."""
    async with asgi_client(app, await make_key("acme", "admin")) as client:
        answer = await client.post(path)
    assert answer.status_code == 503, f"POST {path}: {answer.status_code} {answer.text}"
