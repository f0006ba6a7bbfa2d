"""Autoscale advice on a real PostgreSQL: it rises with the observed latency, and
each change is recorded in the log. A task failed since its lease counts the wait it had."""

from __future__ import annotations

import asyncio

import pytest
from fastapi import FastAPI
from sqlalchemy import URL

from app.main import create_app, dispose
from app.settings import Settings
from scheduler.service import SchedulerLoop, SchedulerTimers
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import JSON, dumps
from tests.integration.scheduler.conftest import (
    Client,
    define,
    events_of_type,
    fail,
    lease,
    post,
    queued,
)


class TestAutoscale:
    async def test_autoscale_advice_rises_with_latency_and_is_recorded(
        self, database_url: URL, make_key: MakeKey
    ) -> None:
        settings = Settings(
            _env_file=None, scheduler_target_latency_s=0.05, scheduler_autoscale_interval_s=0.1
        )
        app = create_app(settings, database_url=database_url)
        try:
            async with asgi_client(app, await make_key("acme", "admin")) as admin:
                await queued(app, admin, jobs=3)
                loop = SchedulerLoop(
                    app.state.engine,
                    app.state.scheduler_controller,
                    SchedulerTimers(autoscale_interval_s=0.1),
                    app.state.decisions,
                )
                await asyncio.sleep(0.5)  # the oldest task waits far past the 50 ms target
                assert await loop.advise() == 1
                advice = (await admin.get("/queues/q/autoscale")).json()
                assert advice["recommended_workers"] > 1
                assert advice["observed_latency_s"] >= 0.5
                [changed] = await events_of_type(admin, "causeway.queue.autoscale_changed")
                assert changed["data"]["recommended"] == advice["recommended_workers"]
        finally:
            await dispose(app)

    # A retry moves the task's available_at an hour on, past its leased_at: its wait read
    # as minus an hour, the mean fell below zero, and the advice read 0 s and fell.
    @pytest.mark.parametrize("first", ["completed", "retried"])
    async def test_a_task_retried_since_its_lease_counts_the_wait_it_had(
        self, database_url: URL, make_key: MakeKey, first: str
    ) -> None:
        settings = Settings(
            _env_file=None, scheduler_target_latency_s=0.5, scheduler_autoscale_interval_s=60
        )
        app = create_app(settings, database_url=database_url)
        try:
            async with asgi_client(app, await make_key("acme", "admin,worker,read")) as admin:
                await _two_tasks_leased_after_a_second(app, admin, first=first)
                loop = SchedulerLoop(
                    app.state.engine,
                    app.state.scheduler_controller,
                    SchedulerTimers(autoscale_interval_s=60),
                    app.state.decisions,
                )
                assert await loop.advise() == 1
                advice = (await admin.get("/queues/q/autoscale")).json()
                # Each task waited ~1 s for a worker, twice the 0.5 s target: more workers.
                assert advice["observed_latency_s"] >= 0.9, advice
                assert advice["recommended_workers"] > 1, advice
        finally:
            await dispose(app)


async def _two_tasks_leased_after_a_second(app: FastAPI, admin: Client, *, first: str) -> None:
    """Two tasks of queue ``q`` leased after waiting a second; the second fails and is
    retried in an hour, the first is ``completed`` or ``retried`` as well (then no row
    left tells the waits: every task leased since the last step is ready again)."""
    await define(admin, id="r", types=["job"], kind="k", queue="q", backoff_base_s=3600)
    await post(admin, type="job")
    await post(admin, type="job")
    await catch_up(app)
    await asyncio.sleep(1.0)
    one, two = await lease(admin, "q"), await lease(admin, "q")
    assert one is not None
    assert two is not None
    if first == "completed":
        done = await admin.post(
            f"/tasks/{one['task']['id']}/complete",
            content=dumps({"lease": one["lease"], "events": []}),
            headers=JSON,
        )
        assert done.status_code == 200, done.text
    else:
        assert (await fail(admin, one, "transient"))["state"] == "ready"
    assert (await fail(admin, two, "transient"))["state"] == "ready"
