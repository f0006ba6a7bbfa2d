"""The wake-up hints of an appender's groups: at most one NOTIFY per ``window_s``.

A hint (``log.wake_hint``: the head, and the types appended) tells readers that the log
moved on. Sent in every group's own transaction, it cost PostgreSQL a pass over its
notification queue and a wake-up of every listening backend, and every listening server
a wake-up of its own, for each group: under load a tenth of the CPU an event took.
Readers take a hint only as a reason to look (they poll anyway, and a woken projection
waits 50 ms for more before it reads), so the appender writes its groups without one
and hands them here once they are committed. The first goes out at once; those that
land within ``window_s`` of the last hint sent go out together at the end of that window,
as one hint that names the head and every type appended since. So every append is still
followed by a hint, never one that comes before its commit, and at most ``window_s`` late.

A hint that cannot be sent (the database went away) is not sent again on its own: its
types go with the next append's hint, and readers poll meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import math

import psycopg
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db.engine import driver_of
from app.store.log import send_wake_hint, wake_hint

logger = logging.getLogger(__name__)


class WakeHints:
    def __init__(self, engine: AsyncEngine, *, window_s: float = 0.02) -> None:
        self._engine = engine
        self._window_s = window_s
        self._position = 0  # the head the next hint names
        self._types: set[str] = set()
        self._is_pending = False  # something landed that no hint has named yet
        self._sent_at = -math.inf  # the loop's time when the last hint went out
        self._timer: asyncio.TimerHandle | None = None
        self._sending: asyncio.Task[None] | None = None
        self._connection: AsyncConnection | None = None
        self._closed = False

    def landed(self, position: int, types: set[str]) -> None:
        """Events of ``types``, up to ``position``, are committed."""
        self._position = max(self._position, position)
        self._types |= types
        self._is_pending = True
        self._schedule()

    def _schedule(self) -> None:
        if not self._is_pending or self._timer is not None or self._sending is not None:
            return
        loop = asyncio.get_running_loop()
        wait_s = self._sent_at + self._window_s - loop.time()
        if wait_s > 0:
            self._timer = loop.call_later(wait_s, self._start)
        else:
            self._start()

    def _start(self) -> None:
        self._timer = None
        self._sending = asyncio.get_running_loop().create_task(
            self._send(), name="causeway-wake-hint"
        )

    async def _send(self) -> None:
        # What has landed so far; what lands while this is on its way goes with the next.
        hint = wake_hint(self._position, self._types)
        types, self._types, self._is_pending = self._types, set(), False
        self._sent_at = asyncio.get_running_loop().time()
        sent = False
        try:
            if self._connection is None:
                connection = await self._engine.connect()
                await connection.execution_options(isolation_level="AUTOCOMMIT")
                self._connection = connection
            await send_wake_hint(await driver_of(self._connection), hint)
            sent = True
        except (psycopg.Error, SQLAlchemyError, OSError) as exc:
            logger.warning("a wake-up hint was not sent (readers poll meanwhile): %r", exc)
            await self._drop()
            # Its types go with the next hint, which the next append sends: no retries
            # while the database is away.
            self._types |= types
            self._is_pending = True
        finally:
            self._sending = None
            if sent and not self._closed:
                self._schedule()  # what landed while this one was on its way

    async def close(self) -> None:
        """Send what no hint has named yet, and give the connection back."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._sending is not None:
            await asyncio.wait([self._sending])
        if self._is_pending:
            await self._send()
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.invalidate()
            await connection.close()
