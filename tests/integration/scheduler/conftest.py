"""What the scheduler's integration tests share: a worker's client, and the HTTP calls
they make as admin and worker (defining routes, posting events, leasing, failing)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from hashlib import sha256
from typing import Any

import httpx2
import orjson
import pytest
from fastapi import FastAPI

from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import JSON, STRUCTURED, dumps, event, registration

Client = httpx2.AsyncClient
# 6,400 characters that look random (and so do not compress), the same in every process.
LONG_KEY = base64.b64encode(b"".join(sha256(bytes([i])).digest() for i in range(150))).decode()
NOW = "2026-11-30T12:00:00+00:00"


@pytest.fixture
async def worker(app: FastAPI, make_key: MakeKey) -> AsyncIterator[Client]:
    async with asgi_client(app, await make_key("acme", "worker")) as client:
        yield client


async def define(admin: Client, **route: Any) -> dict[str, Any]:
    response = await admin.post("/routes", content=dumps(route), headers=JSON)
    assert response.status_code == 201, response.text
    return dict(response.json())


async def queued(app: FastAPI, admin: Client, jobs: int = 1, **route: Any) -> None:
    """Route ``job`` events to queue ``q`` (``route`` overrides), post ``jobs`` of them,
    and let the dispatcher make their tasks."""
    await define(admin, **{"id": "r", "types": ["job"], "kind": "k", "queue": "q", **route})
    for _ in range(jobs):
        await post(admin, type="job")
    await catch_up(app)


async def post(client: Client, **attributes: Any) -> dict[str, Any]:
    body = event(**attributes)
    response = await client.post("/events", content=dumps(body), headers=STRUCTURED)
    assert response.status_code == 201, response.text
    return body


async def three_stable_versions_and_a_rollback_route(admin: Client) -> None:
    """Service ``gate`` promoted through versions 1, 2 and 3 of ``faces``, and a route of
    ``frame`` events whose model mismatches roll it back."""
    for version in ("1", "2", "3"):
        await admin.post("/models/faces/versions", content=registration(version), headers=JSON)
    for version in ("1", "2", "3"):
        body = {"model": "faces", "version": version, "percent": 100}
        await admin.post("/deployments/gate/rollouts", content=dumps(body), headers=JSON)
        await admin.post("/deployments/gate/promote", content=b"{}", headers=JSON)
    await define(
        admin, id="r", types=["frame"], kind="k", queue="q", max_retries=0,
        service="gate", on_model_mismatch="rollback",
    )  # fmt: skip


async def lease(client: Client, queue: str, **profile: Any) -> dict[str, Any] | None:
    body = {"worker": "w1", **profile}
    response = await client.post(f"/queues/{queue}/lease", content=dumps(body), headers=JSON)
    if response.status_code == 204:
        return None
    assert response.status_code == 200, response.text
    return dict(response.json())


async def heartbeat(client: Client, leased: dict[str, Any], **body: Any) -> httpx2.Response:
    return await client.post(
        f"/tasks/{leased['task']['id']}/heartbeat",
        content=dumps({"lease": leased["lease"], **body}),
        headers=JSON,
    )


async def fail(client: Client, leased: dict[str, Any], error_class: str) -> dict[str, Any]:
    response = await client.post(
        f"/tasks/{leased['task']['id']}/fail",
        content=dumps({"lease": leased["lease"], "class": error_class, "message": "boom"}),
        headers=JSON,
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


async def queues(client: Client) -> dict[str, dict[str, Any]]:
    return {q["queue"]: q for q in (await client.get("/queues")).json()["queues"]}


async def events_of_type(client: Client, event_type: str) -> list[dict[str, Any]]:
    response = await client.get("/replay", params={"types": event_type})
    return [orjson.loads(line) for line in response.text.splitlines() if line]
