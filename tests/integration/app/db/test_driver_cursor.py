"""Server-side cursors on the driver (``app.db.engine.server_cursor``: the relay reads its
batches through one, replay its streams) in a task that is cancelled, at whatever moment:
the cursor is left closed. One cancelled while its CLOSE was on the wire stayed open in
psycopg after the server had closed it, and warned when collected: with warnings as
errors, that failed whichever test happened to be running then."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import warnings
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import DriverStatement
from app.store.log import EventLog
from app.store.reads import EventReader
from app.store.records import EventFilter, NewEvent

ROWS = DriverStatement.of(text("SELECT g FROM generate_series(1, 2000) AS g"))


async def relay_like(engine: AsyncEngine) -> None:
    while True:
        async with engine.connect() as conn, ROWS.cursor(conn) as cursor:
            while await cursor.fetchmany(100):
                pass


async def replay(engine: AsyncEngine) -> None:
    while True:
        async with engine.connect() as conn:
            async for _ in EventReader(conn).replay("acme", EventFilter(), fetch_rows=50):
                pass


@pytest.mark.parametrize("read", [relay_like, replay])
async def test_a_reader_cancelled_at_any_moment_leaves_no_cursor_open(
    engine: AsyncEngine, read: Callable[[AsyncEngine], Coroutine[Any, Any, None]]
) -> None:
    async with engine.begin() as conn:
        stored = [NewEvent(id=f"e{n}", source="/s", type="t", stream="s") for n in range(500)]
        await EventLog(conn).append("acme", stored)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(400):
            reading = asyncio.create_task(read(engine))
            await asyncio.sleep(n % 11 / 1000)  # cancelled a little later each time
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
        gc.collect()
    left_open = [str(w.message) for w in caught if "ServerCursor" in str(w.message)]
    assert left_open == []
