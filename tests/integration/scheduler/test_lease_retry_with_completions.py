"""A lease request sent again with its completions folded in (the `complete` list),
asking for fewer than it holds: a 409 that writes nothing; sent again whole, the
completions get their answers and the leases come back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import URL

from app.main import create_app, dispose
from app.settings import Settings
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import BATCH, JSON, dumps, event
from tests.integration.scheduler.conftest import Client, define, queues


@pytest.fixture
async def app(database_url: URL) -> AsyncIterator[FastAPI]:
    app = create_app(Settings(_env_file=None, run_scheduler=False), database_url=database_url)
    yield app
    await dispose(app)


@pytest.fixture
async def worker(app: FastAPI, make_key: MakeKey) -> AsyncIterator[Client]:
    async with asgi_client(app, await make_key("acme", "admin")) as client:
        await define(client, id="r", types=["job"], kind="k", queue="q")
        jobs = [event(type="job") for _ in range(6)]
        assert (await client.post("/events", content=dumps(jobs), headers=BATCH)).status_code == 201
        await catch_up(app)
        yield client


async def post(client: Client, body: dict[str, Any]) -> Any:
    return await client.post("/queues/q/lease", content=dumps(body), headers=JSON)


async def test_complete_and_lease_retry_asking_fewer_then_whole(worker: Client) -> None:
    first = await post(worker, {"worker": "w1", "max_tasks": 1})
    [one] = first.json()["tasks"]
    body = {
        "worker": "w1",
        "max_tasks": 3,
        "request_id": "RR",
        "complete": [{"task": one["task"]["id"], "lease": one["lease"], "events": []}],
    }
    a = await post(worker, body)
    assert a.status_code == 200, a.text
    before = {k: v for k, v in (await queues(worker))["q"].items() if "age" not in k}
    refused = await post(worker, {**body, "max_tasks": 2})
    assert refused.status_code == 409, refused.text
    assert refused.json()["leased"] == 3
    assert {
        k: v for k, v in (await queues(worker))["q"].items() if "age" not in k
    } == before  # nothing half-done
    again = await post(worker, body)
    assert again.status_code == 200, again.text
    assert again.json()["completed"] == a.json()["completed"]
    assert [t["lease"] for t in again.json()["tasks"]] == [t["lease"] for t in a.json()["tasks"]]
    # the same request, without its completions: still its leases
    bare = await post(worker, {k: v for k, v in body.items() if k != "complete"})
    assert [t["lease"] for t in bare.json()["tasks"]] == [t["lease"] for t in a.json()["tasks"]]
