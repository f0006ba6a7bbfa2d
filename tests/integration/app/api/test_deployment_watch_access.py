"""A revoked key stops working within CAUSEWAY_KEY_CACHE_TTL_S, also for a deployment
watch it opened: the watch was authorized once, at its start, and went on sending the
tenant's changes for as long as the client stayed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from app.main import create_app, dispose
from app.settings import Settings
from app.store.keys import KeyStore
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import JSON, registration


@pytest.fixture
async def app_ttl0(database_url: URL) -> AsyncIterator[FastAPI]:
    app = create_app(Settings(_env_file=None, key_cache_ttl_s=0), database_url=database_url)
    yield app
    await dispose(app)


async def test_a_watch_stops_sending_once_its_key_is_revoked(
    app_ttl0: FastAPI, make_key: MakeKey, engine: AsyncEngine
) -> None:
    app = app_ttl0
    async with asgi_client(app, await make_key("acme", "admin")) as admin:
        for v in ("1", "2"):
            r = await admin.post("/models/m/versions", content=registration(v), headers=JSON)
            assert r.status_code == 201, r.text
        r = await admin.post(
            "/deployments/svc/rollouts", json={"model": "m", "version": "1", "percent": 100}
        )
        assert r.status_code in (200, 201), r.text
        await catch_up(app)

        watcher = await make_key("acme", "read")  # e.g. a key that leaked
        loop = asyncio.get_running_loop()
        stop = loop.time() + 20
        body = bytearray()
        first = True

        async def receive() -> dict[str, Any]:
            nonlocal first
            if first:
                first = False
                return {"type": "http.request", "body": b"", "more_body": False}
            while loop.time() < stop:
                await asyncio.sleep(0.05)
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.body":
                body.extend(message.get("body", b""))

        path = "/deployments/svc/watch"
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
            "root_path": "", "query_string": b"",
            "headers": [(b"authorization", f"Bearer {watcher}".encode())],
            "client": ("127.0.0.1", 1), "server": ("causeway", 80),
        }  # fmt: skip
        task = asyncio.create_task(app(scope, receive, send))
        async with asyncio.timeout(5):  # the watch has begun
            while b": watching" not in body:
                await asyncio.sleep(0.05)
        # The operator revokes the key; CAUSEWAY_KEY_CACHE_TTL_S is 0.
        async with engine.begin() as conn:
            await KeyStore(conn).revoke(watcher.split("_")[1])
        await asyncio.sleep(0.5)
        # A change made after the revocation.
        r = await admin.post("/deployments/svc/promote", json={})
        assert r.status_code in (200, 201), r.text
        await catch_up(app)
        await asyncio.wait_for(task, 15)
        ended = loop.time()
    assert b"event:" not in body, bytes(body).decode()
    assert ended < stop, "the watch ended on its own, before its client left"
