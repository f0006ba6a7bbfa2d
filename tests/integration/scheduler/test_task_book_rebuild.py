"""A rebuild of the task book (``scheduler-tasks``) while commands decide on tasks:
``ProjectionRunner.rebuild`` read the log's head, then emptied ``tasks`` and folded the
log up to that head again, so a decision a command made in between (appended after the
head was read, its row written before the rows were emptied) was lost from its row until
the next step, and a worker's lease of that task was refused meanwhile. The rebuild now
holds writers off and reads the head once none is under way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import URL

from app.main import create_app, dispose
from app.projections import checkpoints
from app.settings import Settings
from scheduler import tasks as t
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import BATCH, JSON, dumps, event
from tests.integration.scheduler.conftest import define
from tests.integration.scheduler.test_batch_races import _rows_agree_with_the_log


@pytest.fixture
async def app(database_url: URL) -> AsyncIterator[FastAPI]:
    app = create_app(Settings(_env_file=None, run_scheduler=False), database_url=database_url)
    yield app
    await dispose(app)


async def test_a_decision_made_while_the_task_book_rebuilds_stays_in_its_row(
    app: FastAPI, make_key: MakeKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        asgi_client(app, await make_key("acme", "admin")) as admin,
        asgi_client(app, await make_key("acme", "worker")) as worker,
    ):
        await define(admin, id="r", types=["job"], kind="k", queue="q")
        posted = await admin.post("/events", content=dumps([event(type="job")]), headers=BATCH)
        assert posted.status_code == 201
        await catch_up(app)

        leased: list[Any] = []
        lock_checkpoint = checkpoints.lock_checkpoint

        async def then_a_lease(conn: Any, name: str) -> Any:
            locked = await lock_checkpoint(conn, name)
            if name == t.TASKS_PROJECTION and not leased:
                # The head is read: a worker leases the task before the rows are emptied.
                body = {"worker": "w1", "lease_s": 60}
                leased.append(await worker.post("/queues/q/lease", content=dumps(body),
                                                 headers=JSON))  # fmt: skip
            return locked

        monkeypatch.setattr(checkpoints, "lock_checkpoint", then_a_lease)
        [book] = [p for p in app.state.runner.projections if p.name == t.TASKS_PROJECTION]
        await asyncio.wait_for(app.state.runner.rebuild(book), 30)
        monkeypatch.setattr(checkpoints, "lock_checkpoint", lock_checkpoint)
        assert leased[0].status_code == 200, leased[0].text

        # Right after the rebuild (the task book not stepped since), the row says what the
        # log says: leased to w1. It said "ready", one decision behind.
        assert not await _rows_agree_with_the_log(app)
        body = {"worker": "w2", "lease_s": 60}
        again = await worker.post("/queues/q/lease", content=dumps(body), headers=JSON)
        assert again.status_code == 204, again.text  # nothing to lease: w1 holds it
