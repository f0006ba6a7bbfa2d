"""A server-side cursor on the driver (``DriverStatement.cursor``: the relay reads its
batches through one) in a task that is cancelled, at whatever moment: the cursor is left
closed. One cancelled while its CLOSE was on the wire stayed open in psycopg after the
server had closed it, and warned when collected: with warnings as errors, that failed
whichever test happened to be running then."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import warnings

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import DriverStatement

ROWS = DriverStatement.of(text("SELECT g FROM generate_series(1, 2000) AS g"))


async def test_a_reader_cancelled_at_any_moment_leaves_no_cursor_open(
    engine: AsyncEngine,
) -> None:
    async def read() -> None:
        while True:
            async with engine.connect() as conn, ROWS.cursor(conn) as cursor:
                while await cursor.fetchmany(100):
                    pass

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(400):
            reading = asyncio.create_task(read())
            await asyncio.sleep(n % 11 / 1000)  # cancelled a little later each time
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
