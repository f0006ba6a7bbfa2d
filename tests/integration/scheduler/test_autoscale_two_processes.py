"""The autoscale advice with two server processes stepping one queue at the same instant:
one steps, the other skips, and each change is one ``causeway.queue.autoscale_changed``
event, from where the one before left the advice."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime

from fastapi import FastAPI
from sqlalchemy import URL

from app.main import create_app, dispose
from app.settings import Settings
from scheduler.autoscale import AutoscaleAdvisor
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.scheduler.conftest import events_of_type, queued

CHANGED = "causeway.queue.autoscale_changed"


async def _step(app: FastAPI, now: datetime, interval_s: float) -> bool:
    """One controller step of queue ``q`` of tenant ``acme`` in ``app``'s process."""
    async with app.state.engine.begin() as conn:
        advisor = AutoscaleAdvisor(conn, app.state.scheduler_controller)
        return await advisor.advise("acme", "q", interval_s=interval_s, now=now)


class TestTwoProcesses:
    async def test_two_processes_stepping_at_once_record_each_change_once(
        self, database_url: URL, make_key: MakeKey
    ) -> None:
        settings = Settings(
            _env_file=None, scheduler_target_latency_s=0.05, scheduler_autoscale_interval_s=0.1
        )
        one = create_app(settings, database_url=database_url)
        two = create_app(settings, database_url=database_url)
        try:
            async with asgi_client(one, await make_key("acme", "admin")) as admin:
                await queued(one, admin, jobs=3)
                await asyncio.sleep(0.3)  # the oldest task waits far past the target
                stepped: list[list[bool]] = []
                for _ in range(5):  # the first step makes the queue's row: both insert it
                    now = datetime.now(UTC)
                    stepped.append(list(await asyncio.gather(_step(one, now, 0.1),
                                                             _step(two, now, 0.1))))  # fmt: skip
                    await asyncio.sleep(0.12)
                assert all(sorted(pair) == [False, True] for pair in stepped), stepped
                changes = await events_of_type(admin, CHANGED)
                moves = [(c["data"]["previous"], c["data"]["recommended"]) for c in changes]
                # Each change once, each from where the one before left it.
                assert all(a != b for a, b in moves), moves
                assert all(x[1] == y[0] for x, y in itertools.pairwise(moves)), moves
                advice = (await admin.get("/queues/q/autoscale")).json()
                assert moves[-1][1] == advice["recommended_workers"]
        finally:
            await dispose(one)
            await dispose(two)
