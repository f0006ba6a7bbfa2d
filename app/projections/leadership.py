"""Who leads: one process per named job (a projection, a relay) holds a PostgreSQL
advisory lock on a connection of its own; the others wait and try again.

The lock lives as long as the connection, so a crashed leader releases it at once, and a
leader whose connection died has lost it (``Leadership.confirm`` raises then)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import psycopg
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine


class Leadership:
    """The lead of one job: its advisory lock, held by one connection."""

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def confirm(self) -> None:
        """Raises when the lock's connection is gone (and the lock with it)."""
        await self._conn.execute(select(1))


@contextlib.asynccontextmanager
async def take_lead(engine: AsyncEngine, lock: str) -> AsyncIterator[Leadership | None]:
    """Try to take the advisory lock named ``lock``; yields the lead when this process has
    it, else None."""
    conn = await engine.connect()
    try:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        key = func.hashtextextended(lock, 0)
        leading = bool((await conn.execute(select(func.pg_try_advisory_lock(key)))).scalar())
        try:
            yield Leadership(conn) if leading else None
        finally:
            if leading:
                # On a connection that died the lock is gone already; the error of
                # unlocking it must not replace what is propagating (a cancellation at
                # shutdown, which a loop would otherwise take for an outage).
                with contextlib.suppress(SQLAlchemyError, psycopg.Error, OSError):
                    await conn.execute(select(func.pg_advisory_unlock(key)))
    finally:
        with contextlib.suppress(SQLAlchemyError, psycopg.Error, OSError):
            await conn.close()
