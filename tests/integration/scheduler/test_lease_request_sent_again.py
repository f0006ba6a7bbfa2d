"""A lease request sent again under its request_id gets back what it leased, whole. Sent
again asking for fewer (a smaller max_tasks, or none), it answered all it held (more
than "up to N tasks"), or, with no max_tasks, the first lease alone: the others stayed
leased to the worker, named by no answer, to wait out their leases and lose an attempt,
what request_id is there to prevent. Such a retry is a 409 naming what it holds now,
with its completions folded in (the `complete` list) too: it writes nothing; sent again
whole, the completions get their answers and the leases come back."""

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

FIRST = {"worker": "w1", "request_id": "R", "max_tasks": 3}


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


@pytest.mark.parametrize(
    "again",
    [{**FIRST, "max_tasks": 1}, {"worker": "w1", "request_id": "R"}],
    ids=["smaller max_tasks", "no max_tasks"],
)
async def test_a_request_sent_again_asking_for_fewer_is_told_what_it_holds(
    worker: Client, again: dict[str, Any]
) -> None:
    first = await worker.post("/queues/q/lease", content=dumps(FIRST), headers=JSON)
    held = [t["task"]["id"] for t in first.json()["tasks"]]
    assert len(held) == 3
    refused = await worker.post("/queues/q/lease", content=dumps(again), headers=JSON)
    assert refused.status_code == 409, refused.text
    assert refused.json()["detail"] == (
        "lease request 'R' leased 3 tasks, which it still holds; "
        "send it again with max_tasks of at least 3"
    )
    same = await worker.post(
        "/queues/q/lease", content=dumps({**FIRST, "max_tasks": 5}), headers=JSON
    )
    assert [t["task"]["id"] for t in same.json()["tasks"]] == held  # up to 5: the same 3


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
