"""Autoscale advice on a real PostgreSQL: it rises with the observed latency, and
each change is recorded in the log."""

from __future__ import annotations

import asyncio

from sqlalchemy import URL

from app.main import create_app, dispose
from app.settings import Settings
from scheduler.service import SchedulerLoop, SchedulerTimers
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.scheduler.conftest import (
    events_of_type,
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
