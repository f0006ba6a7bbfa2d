"""The dispatcher follows appends by their wake-up hints, not by its poll, even across
the moment the first route appears (when what it reads widens)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import URL, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import tasks
from app.main import create_app, dispose
from app.projections.base import Selection
from app.settings import Settings
from scheduler.projections import Dispatcher
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import JSON, STRUCTURED, dumps, event

POLL_S = 60.0  # a missed wake-up would wait this long


@pytest.fixture
async def app(database_url: URL) -> AsyncIterator[FastAPI]:
    settings = Settings(_env_file=None, projection_poll_interval_s=POLL_S, run_scheduler=False)
    app = create_app(settings, database_url=database_url)
    yield app
    await dispose(app)


async def test_an_event_appended_while_the_first_route_is_applied_is_dispatched_at_once(
    app: FastAPI, make_key: MakeKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = asgi_client(app, await make_key("acme", "admin"))
    running = asyncio.create_task(app.state.runner.run())
    await asyncio.sleep(1.0)  # leading and listening
    original = Dispatcher.selection
    appended = asyncio.Event()

    async def selection(self: Dispatcher, conn: AsyncConnection) -> Selection:
        chosen = await original(self, conn)
        if chosen.tenants and not appended.is_set():
            # A job commits after this batch read the head, before it widens its interest.
            posted = await admin.post(
                "/events", content=dumps(event(type="job")), headers=STRUCTURED
            )
            assert posted.status_code == 201
            await asyncio.sleep(0.2)  # its hint arrives while the interest is still narrow
            appended.set()
        return chosen

    monkeypatch.setattr(Dispatcher, "selection", selection)
    route: dict[str, Any] = {"id": "r", "types": ["job"], "kind": "k", "queue": "q"}
    assert (await admin.post("/routes", content=dumps(route), headers=JSON)).status_code == 201
    async with asyncio.timeout(10):
        await appended.wait()
        while True:
            async with app.state.engine.connect() as conn:
                if (await conn.execute(select(func.count()).select_from(tasks))).scalar():
                    break
            await asyncio.sleep(0.05)
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    await admin.aclose()
