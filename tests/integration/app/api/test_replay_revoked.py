"""A revoked key "stops working within CAUSEWAY_KEY_CACHE_TTL_S" (README), and the deployment
watches and lease long-polls it opened end: a replay it opened went on streaming the
tenant's whole log after the revocation (from a review). It is now cut off before its next
fetch, its body left without its end, so that the client sees a replay cut short."""

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
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import BATCH, dumps, event

EVENTS = 400
FETCH_ROWS = 10


@pytest.fixture
async def app_asking_every_time(database_url: URL) -> AsyncIterator[FastAPI]:
    settings = Settings(
        _env_file=None,
        key_cache_ttl_s=0,
        run_projections=False,
        run_scheduler=False,
        replay_fetch_rows=FETCH_ROWS,
    )
    app = create_app(settings, database_url=database_url)
    yield app
    await dispose(app)


class _PausingReader:
    """An ASGI client of one GET that stops reading after the first part of the body
    until ``resume`` is set; what it received, and whether the body reached its end."""

    def __init__(self) -> None:
        self.body = bytearray()
        self.first_part = asyncio.Event()
        self.resume = asyncio.Event()
        self.complete = False
        self._left = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        await self._left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] != "http.response.body":
            return
        self.body.extend(message.get("body", b""))
        if not self.first_part.is_set():
            self.first_part.set()
            await self.resume.wait()
        if not message.get("more_body", False):
            self.complete = True

    async def get(self, app: FastAPI, key: str, query: bytes) -> None:
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "GET", "scheme": "http", "path": "/replay", "raw_path": b"/replay",
            "root_path": "", "query_string": query,
            "headers": [(b"authorization", f"Bearer {key}".encode())],
            "client": ("127.0.0.1", 1), "server": ("causeway", 80),
        }  # fmt: skip
        try:
            await app(scope, self.receive, self.send)
        finally:
            self._left.set()


@pytest.mark.parametrize("form", ["ndjson", "parquet"])
async def test_a_replay_opened_before_its_key_was_revoked_is_cut_off(
    app_asking_every_time: FastAPI, make_key: MakeKey, engine: AsyncEngine, form: str
) -> None:
    app = app_asking_every_time
    async with asgi_client(app, await make_key("acme", "ingest")) as producer:
        for start in range(0, EVENTS, 100):
            batch = [event(data={"n": start + i}) for i in range(100)]
            sent = await producer.post("/events", content=dumps(batch), headers=BATCH)
            assert sent.status_code == 201, sent.text
    leaked = await make_key("acme", "read")
    reader = _PausingReader()
    replay = asyncio.create_task(reader.get(app, leaked, f"format={form}".encode()))
    async with asyncio.timeout(10):
        await reader.first_part.wait()
    lines_before = reader.body.count(b"\n")
    async with engine.begin() as conn:  # the operator revokes the leaked key
        await KeyStore(conn).revoke(leaked.split("_")[1])
    async with asgi_client(app, leaked) as again:
        assert (await again.get("/replay")).status_code == 401
    reader.resume.set()
    async with asyncio.timeout(20):
        await replay
    assert not reader.complete, "the replay reached its end for a revoked key"
    if form == "ndjson":
        lines = reader.body.count(b"\n")
        assert lines <= lines_before + FETCH_ROWS, f"{lines} of {EVENTS} events streamed"


async def test_a_replay_whose_key_stays_reaches_its_end(
    app_asking_every_time: FastAPI, make_key: MakeKey
) -> None:
    async with asgi_client(app_asking_every_time, await make_key("acme", "ingest,read")) as c:
        batch = [event(data={"n": n}) for n in range(3 * FETCH_ROWS + 1)]
        assert (await c.post("/events", content=dumps(batch), headers=BATCH)).status_code == 201
        replayed = await c.get("/replay")
        assert replayed.status_code == 200
        assert replayed.text.count("\n") == 3 * FETCH_ROWS + 1
