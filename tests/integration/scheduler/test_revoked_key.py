"""A revoked key "stops working within CAUSEWAY_KEY_CACHE_TTL_S" (README, settings table),
on a lease long-poll it opened too (up to CAUSEWAY_SCHEDULER_MAX_WAIT_S): that ends with
401, and does not hand the next task, with its trigger event's data, to the revoked key."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI
from sqlalchemy import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from app.main import create_app, dispose
from app.settings import Settings
from app.store.keys import KeyStore
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import JSON, STRUCTURED, dumps, event


@pytest.fixture
async def app_ttl0(database_url: URL) -> AsyncIterator[FastAPI]:
    settings = Settings(_env_file=None, key_cache_ttl_s=0, run_scheduler=False)
    app = create_app(settings, database_url=database_url)
    yield app
    await dispose(app)


async def test_a_lease_long_poll_opened_before_revocation_leases_no_task_after_it(
    app_ttl0: FastAPI, make_key: MakeKey, engine: AsyncEngine
) -> None:
    app = app_ttl0
    async with (
        asgi_client(app, await make_key("acme", "admin")) as admin,
        asgi_client(app, worker_key := await make_key("acme", "worker")) as worker,
    ):
        route = {"id": "r", "types": ["job"], "kind": "k", "queue": "q"}
        assert (await admin.post("/routes", content=dumps(route), headers=JSON)).status_code == 201
        await catch_up(app)

        polling = asyncio.create_task(
            worker.post(
                "/queues/q/lease",
                content=dumps({"worker": "w1", "wait_s": 10}),
                headers=JSON,
            )
        )
        await asyncio.sleep(0.5)  # the long-poll is waiting on an empty queue
        async with engine.begin() as conn:  # the operator revokes the (leaked) worker key
            await KeyStore(conn).revoke(worker_key.split("_")[1])
        await asyncio.sleep(0.5)  # well past CAUSEWAY_KEY_CACHE_TTL_S = 0

        secret = event(type="job", data={"secret": "after the revocation"})
        posted = await admin.post("/events", content=dumps(secret), headers=STRUCTURED)
        assert posted.status_code == 201
        await catch_up(app)  # the dispatcher makes the task

        answer = await asyncio.wait_for(polling, 15)
        # A new request with the key is refused...
        again = await worker.post("/queues/q/lease", content=dumps({"worker": "w1"}), headers=JSON)
        assert again.status_code == 401
    # ...and so is the long-poll, rather than leasing the task made after the revocation
    # (and sending its trigger's data).
    assert answer.status_code == 401, answer.text
    assert "after the revocation" not in answer.text
