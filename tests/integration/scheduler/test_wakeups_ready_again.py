"""A long-poll is woken when a task becomes ready again (retried at once, requeued), as
docs/scheduler.md promises.

The hint of a command's decision is sent by the appender as soon as the decision's
append group commits, but the task's row (state ``ready``) is written afterwards, in the
request's own transaction: a waiting lease woken by that hint scanned before the row
committed (about a third of the time), found nothing, and slept until its next try. The
command now also notifies ``causeway_tasks_ready`` in its own transaction. Here a
waiting lease's fallback try is pushed past its whole wait, so one wake-up missed is a
lease that comes back empty."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import URL

from app.main import create_app, dispose
from app.settings import Settings
from scheduler.web import leases
from tests.integration.events import JSON, dumps
from tests.integration.scheduler.conftest import Client, lease, queued

ROUNDS = 10
WAIT_S = 10  # a lease's wait: one woken in time answers in milliseconds


@pytest.fixture(autouse=True)
def no_fallback_tries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leases, "_WOKEN_POLL_S", 2 * WAIT_S)


@pytest.fixture
async def app(database_url: URL) -> AsyncIterator[FastAPI]:
    app = create_app(
        Settings(_env_file=None, db_pool_size=16, run_scheduler=False), database_url=database_url
    )
    yield app
    await dispose(app)


async def _listening(app: FastAPI) -> None:
    app.state.wakeups.start()
    async with asyncio.timeout(10):
        while not app.state.wakeups.listening:
            await asyncio.sleep(0.05)


async def _fail(worker: Client, held: dict[str, Any], expected_state: str) -> None:
    body = {"lease": held["lease"], "class": "transient", "message": "m"}
    response = await worker.post(
        f"/tasks/{held['task']['id']}/fail", content=dumps(body), headers=JSON
    )
    assert response.status_code == 200, response.text
    assert response.json()["state"] == expected_state


async def test_a_waiting_lease_gets_a_task_retried_at_once_without_waiting_a_second(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    await queued(app, admin, max_retries=100, backoff_base_s=0)  # retries are ready at once
    await _listening(app)
    held = await lease(worker, "q")
    assert held is not None
    latencies = []
    for n in range(ROUNDS):
        waiting = asyncio.create_task(lease(worker, "q", worker=f"w{n % 2}", wait_s=WAIT_S))
        await asyncio.sleep(0.1)  # the other worker's lease is waiting
        await _fail(worker, held, "ready")
        answered = time.monotonic()
        held = await waiting
        assert held is not None
        latencies.append(round(time.monotonic() - answered, 3))
    assert max(latencies) < WAIT_S / 2, sorted(latencies)


async def test_a_waiting_lease_gets_a_requeued_dead_letter_without_waiting_a_second(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    await queued(app, admin, max_retries=0)
    await _listening(app)
    held = await lease(worker, "q")
    assert held is not None
    latencies = []
    for n in range(ROUNDS):
        await _fail(worker, held, "dead")
        waiting = asyncio.create_task(lease(worker, "q", worker=f"w{n % 2}", wait_s=WAIT_S))
        await asyncio.sleep(0.1)
        requeued = await admin.post(
            f"/dead-letters/{held['task']['id']}/requeue", content=b"{}", headers=JSON
        )
        assert requeued.status_code == 200, requeued.text
        answered = time.monotonic()
        held = await waiting
        assert held is not None
        latencies.append(round(time.monotonic() - answered, 3))
    assert max(latencies) < WAIT_S / 2, sorted(latencies)
