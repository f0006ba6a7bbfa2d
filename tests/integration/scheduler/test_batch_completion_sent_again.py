"""A completion sent again after its answer was lost: the same results are answered as
the first time (200, nothing new in the log); other results are a clear 409. By
``POST /tasks/complete`` and by a lease request that brings its completions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import URL, text

from app.main import create_app, dispose
from app.settings import Settings
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import JSON, dumps, event
from tests.integration.scheduler.conftest import Client, queued


@pytest.fixture
async def app(database_url: URL) -> AsyncIterator[FastAPI]:
    app = create_app(Settings(_env_file=None, run_scheduler=False), database_url=database_url)
    yield app
    await dispose(app)


async def _log_size(app: FastAPI) -> int:
    async with app.state.engine.connect() as conn:
        return int((await conn.execute(text("SELECT count(*) FROM events"))).scalar_one())


async def _leased(worker: Client, n: int) -> list[dict[str, Any]]:
    body = {"worker": "w1", "max_tasks": n}
    response = await worker.post("/queues/q/lease", content=dumps(body), headers=JSON)
    assert response.status_code == 200, response.text
    return list(response.json()["tasks"])


@pytest.mark.parametrize("by_lease_request", [False, True])
async def test_a_batch_completion_sent_again_answers_as_before_or_409(
    app: FastAPI, make_key: MakeKey, by_lease_request: bool
) -> None:
    async with (
        asgi_client(app, await make_key("acme", "admin")) as admin,
        asgi_client(app, await make_key("acme", "worker")) as worker,
    ):
        await queued(app, admin, jobs=3)
        leased = await _leased(worker, 3)
        done = [
            {"task": one["task"]["id"], "lease": one["lease"],
             "events": [event(type="job.done", data={"n": n})]}
            for n, one in enumerate(leased)
        ]  # fmt: skip

        async def send(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
            if by_lease_request:
                body = {"worker": "w1", "max_tasks": 1, "complete": items}
                response = await worker.post("/queues/q/lease", content=dumps(body), headers=JSON)
                assert response.status_code == 200, response.text
                return list(response.json()["completed"])
            body = {"tasks": items}
            response = await worker.post("/tasks/complete", content=dumps(body), headers=JSON)
            assert response.status_code == 200, response.text
            return list(response.json()["tasks"])

        first = await send(done)
        assert [a["status"] for a in first] == [200, 200, 200]
        size = await _log_size(app)
        again = await send(list(reversed(done)))  # in another order, too
        assert again == list(reversed(first))
        assert await _log_size(app) == size  # nothing new
        other = [{**done[0], "events": [event(type="job.done", data={"n": "other"})]}]
        [refused] = await send(other)
        assert refused["status"] == 409, refused
        assert refused["problem"]["status"] == 409
        assert await _log_size(app) == size
