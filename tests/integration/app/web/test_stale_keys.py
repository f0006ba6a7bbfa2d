"""A key the database confirmed lately stands while the database does not answer, for
``GET /metrics`` alone (app/web/auth.py). From a review: the first version let it stand on
every route once its lookup took 2 s, so a revoked key wrote events while ``api_keys`` was
locked (or the pool was busy) for a moment."""

from __future__ import annotations

import asyncio
import time

import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.settings import Settings
from app.store.keys import KeyStore, parse_scopes
from tests.integration.conftest import asgi_client
from tests.integration.events import STRUCTURED, dumps, event


@pytest.fixture
def settings() -> Settings:
    return Settings(_env_file=None, key_cache_ttl_s=0.2)


async def _hold_keys_table(engine: AsyncEngine, locked: asyncio.Event, hold_s: float) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE"))
        locked.set()
        await asyncio.sleep(hold_s)


async def _keys_locked_for(engine: AsyncEngine, hold_s: float) -> asyncio.Task[None]:
    locked = asyncio.Event()
    holder = asyncio.create_task(_hold_keys_table(engine, locked, hold_s))
    await locked.wait()
    return holder


async def test_a_revoked_key_is_refused_while_its_lookup_is_slow(
    app: FastAPI, engine: AsyncEngine
) -> None:
    async with engine.begin() as conn:
        issued = await KeyStore(conn).create("acme", parse_scopes("ingest,read"))
    async with asgi_client(app, issued.key) as client:
        first = await client.post("/events", content=dumps(event()), headers=STRUCTURED)
        assert first.status_code == 201, first.text  # confirmed, and cached
        async with engine.begin() as conn:
            await KeyStore(conn).revoke(issued.principal.key_id)
        await asyncio.sleep(0.5)  # the cache entry runs out (CAUSEWAY_KEY_CACHE_TTL_S)
        holder = await _keys_locked_for(engine, 3.0)
        after = await client.post("/events", content=dumps(event()), headers=STRUCTURED)
        await holder
        assert after.status_code == 401, after.text
        metrics = await client.get("/metrics")
        assert metrics.status_code == 401, metrics.text  # the database answers: revoked


async def test_metrics_answer_a_key_confirmed_lately_while_its_lookup_is_slow(
    app: FastAPI, engine: AsyncEngine
) -> None:
    async with engine.begin() as conn:
        issued = await KeyStore(conn).create("acme", parse_scopes("read"))
    async with asgi_client(app, issued.key) as client:
        assert (await client.get("/metrics")).status_code == 200  # confirmed, and cached
        await asyncio.sleep(0.5)
        holder = await _keys_locked_for(engine, 4.0)
        started = time.monotonic()
        metrics = await client.get("/metrics")
        took = time.monotonic() - started
        await holder
        assert metrics.status_code == 200, metrics.text
        assert took < 3.5, f"the scrape took {took:.1f} s"
