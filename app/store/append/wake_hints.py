"""The wake-up hints of an appender's groups: at most one NOTIFY per ``window_s``.

A hint (``log.wake_hint``: the head, and the types appended) tells readers that the log
moved on. Sent in every group's own transaction, it cost PostgreSQL a pass over its
notification queue and a wake-up of every listening backend, and every listening server
a wake-up of its own, for each group: under load a tenth of the CPU an event took.
Readers take a hint only as a reason to look (they poll anyway, and a woken projection
waits 50 ms for more before it reads), so the appender writes its groups without one
and hands them here once they are committed. The first goes out at once; those that
land within ``window_s`` of the last hint sent go out together at the end of that window,
as one hint that names the head and every type appended since. No hint comes before the
commit of what it names.

A hint goes on a connection of its own, kept; one the database dropped (a restart, an
idle timeout) is replaced at once. When no connection can be had, the hint waits, with
whatever lands meanwhile, and is tried again every ``retry_s`` (readers poll meanwhile).
Once the appender closes, what is still due is sent, within ``close_timeout_s``, and
what lands after that gets no hint.
"""

from __future__ import annotations

import asyncio
import logging
import math

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db.engine import driver_of
from app.store.append.writes import send_wake_hint, wake_hint

logger = logging.getLogger(__name__)


class WakeHints:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        window_s: float = 0.02,
        retry_s: float = 1.0,
        close_timeout_s: float = 5.0,
    ) -> None:
        self._engine = engine
        self._window_s = window_s
        self._retry_s = retry_s
        self._close_timeout_s = close_timeout_s
        self._position = 0  # the head the next hint names
        self._types: set[str] = set()
        self._is_pending = False  # something landed that no hint has named yet
        self._sent_at = -math.inf  # the loop's time when the last hint went out
        self._is_failing = False  # the last try found no connection that works
        self._timer: asyncio.TimerHandle | None = None
        self._sending: asyncio.Task[None] | None = None
        self._connection: AsyncConnection | None = None
        self._closed = False

    def landed(self, position: int, types: set[str]) -> None:
        """Events of ``types``, up to ``position``, are committed."""
        if self._closed:
            return
        self._position = max(self._position, position)
        self._types |= types
        self._is_pending = True
        self._schedule()

    def _schedule(self) -> None:
        if self._closed or not self._is_pending:
            return
        if self._timer is not None or self._sending is not None:
            return  # it goes when they do
        loop = asyncio.get_running_loop()
        wait_s = self._retry_s if self._is_failing else self._sent_at + self._window_s - loop.time()
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
        try:
            await self._notify(hint)
        except Exception as exc:
            if not self._is_failing:
                logger.warning("a wake-up hint was not sent (readers poll meanwhile): %r", exc)
            self._is_failing = True
            self._types |= types  # they go with the next try
            self._is_pending = True
        else:
            if self._is_failing:
                logger.info("wake-up hints are sent again")
            self._is_failing = False
        finally:
            self._sending = None
            self._schedule()  # what landed meanwhile, or the next try

    async def _notify(self, hint: str) -> None:
        """Send ``hint`` on the kept connection; on a new one at once when the database
        dropped that one."""
        try:
            await self._notify_on_connection(hint)
        except Exception:
            await self._drop()
            try:
                await self._notify_on_connection(hint)
            except Exception:
                await self._drop()
                raise

    async def _notify_on_connection(self, hint: str) -> None:
        if self._connection is None:
            self._connection = await self._engine.connect()
            await self._connection.execution_options(isolation_level="AUTOCOMMIT")
        await send_wake_hint(await driver_of(self._connection), hint)

    async def close(self) -> None:
        """Send what is still due (within ``close_timeout_s``) and give the connection
        back. A group that lands afterwards gets no hint."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            async with asyncio.timeout(self._close_timeout_s):
                if self._sending is not None:
                    await asyncio.wait([self._sending])
                if self._is_pending:
                    await self._notify(wake_hint(self._position, self._types))
        except Exception as exc:
            logger.warning("the last wake-up hint was not sent: %r", exc)
            if self._sending is not None:
                self._sending.cancel()
                await asyncio.wait([self._sending])
            await self._drop()
        if self._connection is not None:
            connection, self._connection = self._connection, None
            await connection.close()

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                await connection.invalidate()
                await connection.close()
            except Exception:  # it is gone already; nothing of it is kept
                logger.debug("a wake-up hint connection did not close cleanly", exc_info=True)
