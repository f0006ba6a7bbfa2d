"""``scheduler/lagging.py``: a row that lags the log is read from the log only
for a command sent again; a lease genuinely lost (expired, then leased to another worker
whose request got a 503 after its append) stays a 409, and a request id used again after
its earlier leases ended does not get those back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import URL

from app.main import create_app, dispose
from app.settings import Settings
from scheduler.service import SchedulerLoop, SchedulerTimers
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import BATCH, JSON, dumps, event
from tests.integration.scheduler.conftest import Client, define, events_of_type
from tests.integration.scheduler.test_resent_after_503 import FailOnce
from tests.integration.scheduler.test_resent_after_503 import fail_once as _fail_once


@pytest.fixture
async def app(database_url: URL) -> AsyncIterator[FastAPI]:
    app = create_app(Settings(_env_file=None, run_scheduler=False), database_url=database_url)
    yield app
    await dispose(app)


@pytest.fixture
def fail_once(monkeypatch: pytest.MonkeyPatch) -> FailOnce:
    return _fail_once.__wrapped__(monkeypatch)  # type: ignore[attr-defined, no-any-return]


@pytest.fixture
async def worker(app: FastAPI, make_key: MakeKey) -> AsyncIterator[Client]:
    async with asgi_client(app, await make_key("acme", "admin")) as client:
        await define(client, id="r", types=["job"], kind="k", queue="q", max_retries=3)
        jobs = [event(type="job", subject="job-0")]
        assert (await client.post("/events", content=dumps(jobs), headers=BATCH)).status_code == 201
        await catch_up(app)
        yield client


async def _lease(client: Client, **body: Any) -> Any:
    return await client.post("/queues/q/lease", content=dumps(body), headers=JSON)


async def _expire(app: FastAPI) -> None:
    state = app.state
    loop = SchedulerLoop(state.engine, state.scheduler_controller, SchedulerTimers(),
                         state.decisions)  # fmt: skip
    await loop.expire_leases()


async def test_a_lease_lost_to_another_worker_whose_row_lags_stays_409(
    app: FastAPI, worker: Client, fail_once: FailOnce
) -> None:
    first = await _lease(worker, worker="w1", max_tasks=1, lease_s=0.05)
    [mine] = first.json()["tasks"]
    await asyncio.sleep(0.2)
    await _expire(app)
    # w2 leases the task; its answer is a 503 after the lease was appended: the row lags.
    fail_once("write_tasks_reading")
    lost = await _lease(worker, worker="w2", max_tasks=1, lease_s=60, request_id="R2")
    assert lost.status_code == 503, lost.text
    task_id, lease_id = mine["task"]["id"], mine["lease"]
    failed = await worker.post(
        f"/tasks/{task_id}/fail",
        content=dumps({"lease": lease_id, "class": "transient", "message": "boom"}),
        headers=JSON,
    )
    assert failed.status_code == 409, failed.text
    done = await worker.post(
        f"/tasks/{task_id}/complete", content=dumps({"lease": lease_id, "events": []}),
        headers=JSON,
    )  # fmt: skip
    assert done.status_code == 409, done.text
    batch = {"tasks": [{"task": task_id, "lease": lease_id, "events": []}]}
    many = await worker.post("/tasks/complete", content=dumps(batch), headers=JSON)
    assert [one["status"] for one in many.json()["tasks"]] == [409], many.text
    # w2 still holds it: its request sent again gets it, and it completes.
    again = await _lease(worker, worker="w2", max_tasks=1, lease_s=60, request_id="R2")
    [held] = again.json()["tasks"]
    assert held["task"]["id"] == task_id
    body = {"lease": held["lease"], "events": []}
    ok = await worker.post(f"/tasks/{task_id}/complete", content=dumps(body), headers=JSON)
    assert ok.status_code == 200, ok.text
    assert len(await events_of_type(worker, "causeway.task.completed")) == 1


async def test_a_request_id_used_again_after_its_leases_expired_leases_anew(
    app: FastAPI, worker: Client, fail_once: FailOnce
) -> None:
    fail_once("write_tasks_reading")
    first = await _lease(worker, worker="w1", max_tasks=1, lease_s=0.05, request_id="R")
    assert first.status_code == 503, first.text
    await asyncio.sleep(0.2)
    # The first try's lease ran out (in the log); the name is used again.
    again = await _lease(worker, worker="w1", max_tasks=1, lease_s=60, request_id="R")
    assert again.status_code in (200, 204), again.text
    leased = await events_of_type(worker, "causeway.task.leased")
    if again.status_code == 200:
        [one] = again.json()["tasks"]
        assert one["lease"] != leased[0]["data"]["lease"]  # not the expired one
    # Expired, the sweeper puts it back; then it is leased anew, once.
    await _expire(app)
    later = await _lease(worker, worker="w1", max_tasks=1, lease_s=60, request_id="R")
    assert later.status_code == 200, later.text
