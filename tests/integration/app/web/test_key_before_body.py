"""A request without a valid key, or with a key that lacks the route's scope, is answered
401 / 403 before its JSON body is read, on every JSON-body route (models, deployments,
routes, leases, task batches, dead letters). FastAPI reads a body before it runs the
route's key check: such a caller was told about its JSON (400 invalid-json), and the
server parsed up to CAUSEWAY_MAX_JSON_BODY_BYTES of JSON for a caller it never
authenticated."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import JSON

ROUTES = [
    "/routes",
    "/models/m/versions",
    "/deployments/svc/rollouts",
    "/dead-letters/requeue",
    "/queues/q/lease",
    "/tasks/fail",
]
UNKNOWN = "cw_000000000000_" + "a" * 43  # well formed, never issued


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize(
    ("who", "status"), [("no key", 401), ("unknown key", 401), ("read key", 403)]
)
async def test_a_caller_without_the_scope_is_refused_before_its_body_is_judged(
    app: FastAPI, make_key: MakeKey, path: str, who: str, status: int
) -> None:
    key = {"no key": "", "unknown key": UNKNOWN}.get(who)
    if key is None:
        key = await make_key("acme", "read")
    async with asgi_client(app, key) as client:
        if not key:
            del client.headers["Authorization"]
        response = await client.post(path, content=b'{"a": 1, "a": 2', headers=JSON)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == (
        "/problems/unauthenticated" if status == 401 else "/problems/forbidden"
    )
