"""A replica that stops answering gives a read its connection on the primary within
``ANSWER_S`` (docs/replicas.md). A freezable TCP proxy in front of the test server stands
for the replica: frozen, it keeps every socket open and accepts new ones, but forwards no
byte (a SIGSTOPped host, a partition that drops packets)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import URL, text

from app.db.engine import create_engine
from app.store.replication import ANSWER_S, FallbackConnector


class Freezable:
    def __init__(self, server: URL) -> None:
        self._server_url = server
        self.thawed = asyncio.Event()
        self.thawed.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.thawed.set()
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await _open(self._server_url)

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while data := await r.read(65536):
                    await self.thawed.wait()
                    w.write(data)
                    await w.drain()
            finally:
                w.close()

        for r, w in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(pipe(r, w))
            self._tasks.add(task)


async def _open(url: URL) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the test server: by TCP, or to its socket (an embedded server's)."""
    folder = url.query.get("host")
    if isinstance(folder, str) and folder.startswith("/"):
        return await asyncio.open_unix_connection(f"{folder}/.s.PGSQL.{url.port or 5432}")
    return await asyncio.open_connection(url.host or "127.0.0.1", url.port or 5432)


@pytest.fixture
async def proxy(server: URL) -> AsyncIterator[Freezable]:
    found = Freezable(server)
    await found.start()
    yield found
    await found.stop()


async def test_a_frozen_replica_is_skipped_within_answer_s(server: URL, proxy: Freezable) -> None:
    """A pooled connection is pinged at checkout; cancelled, psycopg's ping sends a cancel
    request and waits for the query's end (5 s + 5 s against a frozen host), and a wait
    that waited for the cancelled checkout (``asyncio.wait_for``) took some 12 s."""
    url = server.set(database="postgres")
    replica = create_engine(
        url.set(host="127.0.0.1", port=proxy.port, query={}), pool_size=1, pre_ping=True, role=None
    )
    primary = create_engine(url, pool_size=1, role=None)
    failures: list[BaseException] = []
    connector = FallbackConnector(replica, primary, failures.append)
    try:
        async with connector.connect() as conn:  # one pooled connection on the replica
            assert (await conn.execute(text("select 1"))).scalar() == 1
        assert not failures
        proxy.thawed.clear()  # the replica's host freezes
        started = time.monotonic()
        async with connector.connect() as conn:
            assert (await conn.execute(text("select 1"))).scalar() == 1
        took = time.monotonic() - started
        assert failures, "the replica was not marked down"
        assert took < ANSWER_S + 1.5, f"the read waited {took:.1f} s for a frozen replica"
    finally:
        proxy.thawed.set()
        await replica.dispose()
        await primary.dispose()
