"""A command sent again after a 503 that came after its decisions were appended: the
appender commits them in a transaction of its own, the request's transaction (the task
rows) then failed, and the rows show the old state until the task book catches up. The
503 says "sending it again writes nothing twice": sent again before the task book caught
up, a failure or a completion got 409 (its row still showed the lease, so it decided
again, and the log refused that), and a lease request under the same ``request_id``
leased other tasks, while the first try's, leased to no one, waited out their leases."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import URL
from sqlalchemy.exc import OperationalError

from app.main import create_app, dispose
from app.settings import Settings
from scheduler.rows import tasks as task_rows
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import BATCH, JSON, dumps, event
from tests.integration.scheduler.conftest import Client, define, events_of_type

TASKS = "causeway.task."


@pytest.fixture
async def app(database_url: URL) -> AsyncIterator[FastAPI]:
    # No scheduler loop: the task book catches up only when a test says so.
    app = create_app(Settings(_env_file=None, run_scheduler=False), database_url=database_url)
    yield app
    await dispose(app)


@pytest.fixture
async def worker(app: FastAPI, make_key: MakeKey) -> AsyncIterator[Client]:
    async with asgi_client(app, await make_key("acme", "admin")) as client:
        await define(client, id="r", types=["job"], kind="k", queue="q", max_retries=3)
        jobs = [event(type="job", subject=f"job-{n}") for n in range(6)]
        assert (await client.post("/events", content=dumps(jobs), headers=BATCH)).status_code == 201
        await catch_up(app)
        yield client


FailOnce = Callable[[str], None]


@pytest.fixture
def fail_once(monkeypatch: pytest.MonkeyPatch) -> FailOnce:
    """Make the next call of ``scheduler.rows.tasks.<name>`` (a row write, after the
    command's decisions were appended) lose its connection, as an outage would."""

    def arm(name: str) -> None:
        real = getattr(task_rows, name)
        calls = 0

        async def failing(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise OperationalError("UPDATE tasks", {}, Exception("connection lost"))
            return await real(*args, **kwargs)

        monkeypatch.setattr(task_rows, name, failing)

    return arm


async def lease(client: Client, **body: Any) -> list[dict[str, Any]]:
    response = await client.post(
        "/queues/q/lease", content=dumps({"worker": "w1", "max_tasks": 2, **body}), headers=JSON
    )
    assert response.status_code == 200, response.text
    return list(response.json()["tasks"])


async def decisions(client: Client, kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in await events_of_type(client, TASKS + kind)]


async def post_twice(client: Client, path: str, body: dict[str, Any]) -> Any:
    """``body`` posted to ``path``: the first answer a 503, the second returned."""
    first = await client.post(path, content=dumps(body), headers=JSON)
    assert first.status_code == 503, first.text
    return await client.post(path, content=dumps(body), headers=JSON)


async def test_a_failure_sent_again_after_a_503_is_answered_as_reported(
    worker: Client, fail_once: FailOnce
) -> None:
    [one, _] = await lease(worker)
    fail_once("write_task")
    body = {"lease": one["lease"], "class": "transient", "message": "boom"}
    again = await post_twice(worker, f"/tasks/{one['task']['id']}/fail", body)
    assert again.status_code == 200, again.text
    assert again.json()["state"] == "ready"
    assert again.json()["attempts"] == 1
    assert len(await decisions(worker, "retried")) == 1  # decided once


async def test_a_completion_sent_again_after_a_503_is_answered_as_before(
    worker: Client, fail_once: FailOnce
) -> None:
    [one, _] = await lease(worker)
    result = event(type="result", source="/w", causationid=one["task"]["trigger"])
    fail_once("write_task")
    body = {"lease": one["lease"], "events": [result]}
    again = await post_twice(worker, f"/tasks/{one['task']['id']}/complete", body)
    assert again.status_code == 200, again.text
    assert again.json()["state"] == "completed"
    [stored] = await events_of_type(worker, "result")
    assert again.json()["results"] == [{"id": result["id"], "position": stored["position"]}]
    assert len(await decisions(worker, "completed")) == 1


@pytest.mark.parametrize("path", ["/tasks/fail", "/tasks/complete"])
async def test_a_batch_sent_again_after_a_503_is_answered_whole(
    worker: Client, fail_once: FailOnce, path: str
) -> None:
    leased = await lease(worker)
    extra: dict[str, Any]
    if path == "/tasks/fail":
        fail_once("write_task")  # each failure is written alone: the first one's write
        extra = {"class": "transient", "message": "boom"}
    else:
        fail_once("write_tasks")  # a group of completions is written in one statement
        extra = {"events": []}
    items = [{"task": one["task"]["id"], "lease": one["lease"], **extra} for one in leased]
    again = await post_twice(worker, path, {"tasks": items})
    assert again.status_code == 200, again.text
    assert [one["status"] for one in again.json()["tasks"]] == [200, 200], again.text
    kind = "retried" if path == "/tasks/fail" else "completed"
    assert len(await decisions(worker, kind)) == 2


async def test_a_lease_request_sent_again_after_a_503_gets_the_leases_its_first_try_made(
    app: FastAPI, worker: Client, fail_once: FailOnce
) -> None:
    fail_once("write_tasks_reading")
    body = {"worker": "w1", "max_tasks": 2, "request_id": "R"}
    again = await post_twice(worker, "/queues/q/lease", body)
    assert again.status_code == 200, again.text
    logged = {(d["task_id"], d["lease"]) for d in await decisions(worker, "leased")}
    answered = {(one["task"]["id"], one["lease"]) for one in again.json()["tasks"]}
    assert answered == logged  # the first try's two leases, and no others
    assert len(logged) == 2
    # Those tasks are the worker's: it completes them, the rows not caught up by the book.
    items = [{"task": t, "lease": lease_id, "events": []} for t, lease_id in answered]
    done = await worker.post("/tasks/complete", content=dumps({"tasks": items}), headers=JSON)
    assert [one["status"] for one in done.json()["tasks"]] == [200, 200], done.text
    await catch_up(app)
    others = await lease(worker, max_tasks=6)
    assert len(others) == 4  # nothing else was leased


async def test_a_completing_lease_request_sent_again_after_a_503_answers_as_before(
    worker: Client, fail_once: FailOnce
) -> None:
    [one] = await lease(worker, max_tasks=1)
    fail_once("write_tasks_reading")
    body = {
        "worker": "w1",
        "max_tasks": 2,
        "request_id": "RC",
        "complete": [{"task": one["task"]["id"], "lease": one["lease"], "events": []}],
    }
    again = await post_twice(worker, "/queues/q/lease", body)
    assert again.status_code == 200, again.text
    assert [c["status"] for c in again.json()["completed"]] == [200], again.text
    assert len(await decisions(worker, "completed")) == 1
    leased = await decisions(worker, "leased")
    mine = {(d["task_id"], d["lease"]) for d in leased if d.get("request") == "RC"}
    assert {(t["task"]["id"], t["lease"]) for t in again.json()["tasks"]} == mine
    assert len(mine) == 2


async def test_a_heartbeat_sent_again_after_a_503_extends_the_lease(
    worker: Client, fail_once: FailOnce
) -> None:
    """Its row still showed the lease as it was: deciding again took the id of the
    extension in the log with other content, a 409 id-conflict for a lease still held."""
    [one, _] = await lease(worker)
    fail_once("write_task")
    again = await post_twice(
        worker, f"/tasks/{one['task']['id']}/heartbeat", {"lease": one["lease"], "lease_s": 60}
    )
    assert again.status_code == 200, again.text
    assert again.json()["state"] == "leased", again.json()
    assert again.json()["lease_expires_at"] > one["task"]["lease_expires_at"]
    assert len(await decisions(worker, "lease_extended")) == 2  # each heartbeat its own
