"""Wake-ups for long-polling leases: one ``LISTEN`` connection per process, not per request.

Every append sends a wake-up hint on ``causeway_events`` naming the types it wrote (see
``app.store.append.writes``): the dispatcher's ``causeway.task.created`` among them, as
it commits, in the transaction that writes the task's row. A command that makes a task
ready again (a retry, a requeue, an expired lease) appends through the group-commit
writer, whose hint goes out before the command's own transaction writes the row: a lease
woken by it could scan before the row is there. Such a command also sends a notice on
``causeway_tasks_ready`` in its own transaction (``announce_ready``), which PostgreSQL
delivers once that transaction commits, the row with it.

``TaskWakeups`` listens to both on one connection of its own and, when a hint names a
type that can make a task ready (created, requeued, retried) or names none, or a notice
comes, wakes every lease waiting in this process; each then tries to lease again. A lease
never relies on it: it waits at most ``fallback_s`` between tries, and while the
listening connection is down, it polls as it did before wake-ups existed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.append.writes import NOTIFY_CHANNEL, read_wake_hint
from scheduler import tasks as t

logger = logging.getLogger(__name__)

READY_TYPES = frozenset({t.CREATED, t.REQUEUED, t.RETRIED})
READY_CHANNEL = "causeway_tasks_ready"
_ANNOUNCE = text(f"SELECT pg_notify('{READY_CHANNEL}', '')")


async def announce_ready(conn: AsyncConnection) -> None:
    """Wake the waiting leases of every process once ``conn``'s transaction commits (the
    task rows it wrote ready with it)."""
    await conn.execute(_ANNOUNCE)


class TaskWakeups:
    """``seen = wakeups.generation`` before a lease attempt, then ``await
    wakeups.wait(seen, timeout_s)`` after it found nothing: returns at once when a
    wake-up came in between, else at the next one (or the timeout)."""

    def __init__(self, dsn: str, *, retry_s: float = 1.0) -> None:
        self._dsn = dsn
        self._retry_s = retry_s
        self._generation = 0
        self._changed: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.listening = False  # whether hints reach this process now

    @property
    def generation(self) -> int:
        return self._generation

    def start(self) -> None:
        """Listen in the background (from the event loop that serves the leases)."""
        if self._task is None:
            self._task = asyncio.create_task(self._listen(), name="task-wakeups")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.listening = False

    async def wait(self, seen: int, timeout_s: float) -> None:
        """Until a wake-up after generation ``seen``, ``timeout_s`` at most."""
        if self._generation != seen or timeout_s <= 0:
            return
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._changed), timeout_s)

    def wake(self) -> None:
        """Wake every waiting lease of this process."""
        self._generation += 1
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)

    async def _listen(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._dsn, autocommit=True
                ) as conn:
                    await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    await conn.execute(f"LISTEN {READY_CHANNEL}")
                    self.listening = True
                    self.wake()  # what was made while not listening is leased now
                    async for notice in conn.notifies():
                        if notice.channel == READY_CHANNEL:
                            self.wake()
                            continue
                        types = read_wake_hint(notice.payload)
                        if types is None or not types.isdisjoint(READY_TYPES):
                            self.wake()
            except (psycopg.Error, OSError) as exc:
                logger.warning("task wake-ups: LISTEN lost (%s); leases poll meanwhile", exc)
            self.listening = False
            await asyncio.sleep(self._retry_s)
