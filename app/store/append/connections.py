"""The connections an appender keeps between its groups.

Checking a connection out of SQLAlchemy's pool and in again, and SQLAlchemy's
transaction, cost a small group more CPU than its statements did: an appender keeps its
connections, in autocommit mode and READ COMMITTED, and drives them on psycopg
directly. One that broke, or was left inside a transaction (a cancelled group), is
dropped and replaced before the next group takes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import AsyncConnection as PsycopgConnection
from psycopg.pq import TransactionStatus
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db.engine import driver_of

_READ_COMMITTED = "SET default_transaction_isolation = 'read committed'"


@dataclass(frozen=True, slots=True)
class KeptConnection:
    """A pooled connection the appender keeps, and the psycopg connection under it."""

    connection: AsyncConnection
    driver: PsycopgConnection[Any]


class KeptConnections:
    """An appender's connections: each group takes one, and gives it back when done."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._idle: list[KeptConnection] = []  # free for the next group

    def give_back(self, held: KeptConnection) -> None:
        """Free for the next group (checked again before it is taken)."""
        self._idle.append(held)

    async def take(self) -> KeptConnection:
        """A held connection, idle; else one from the pool that answers. When the server
        went away, every idle connection in the pool went with it: each is tried and
        dropped in turn, so only the group that found a held one dead fails."""
        while self._idle:
            held = self._idle.pop()
            status = held.driver.info.transaction_status
            if not held.driver.closed and status == TransactionStatus.IDLE:
                return held
            await self.discard(held)
        tries = getattr(self._engine.pool, "checkedin", lambda: 0)()  # idle, maybe dead
        for attempt in range(tries + 1):
            connection = await self._engine.connect()
            # The groups begin and commit their own transactions (append_on in the round
            # trips of its statements, causeway_append as one statement); the pool resets
            # the mode when the connection goes back. A group written in one statement is
            # a transaction of the database's default isolation, which must be READ
            # COMMITTED: under REPEATABLE READ, one that waited at the head for the group
            # before it would fail (it locks a row changed since its snapshot).
            await connection.execution_options(isolation_level="AUTOCOMMIT")
            fresh = KeptConnection(connection, await driver_of(connection))
            try:
                await fresh.driver.execute(_READ_COMMITTED)
            except psycopg.OperationalError:
                await self.discard(fresh)
                if attempt == tries:
                    raise
                continue
            return fresh
        raise AssertionError("unreachable")  # pragma: no cover

    async def release(self) -> None:
        """Give every idle connection back to the pool (or drop it, if broken)."""
        idle, self._idle = self._idle, []
        for held in idle:
            if held.driver.closed or held.driver.broken:
                await self.discard(held)
                continue
            try:
                await held.driver.execute("RESET default_transaction_isolation")
            except psycopg.OperationalError:
                await self.discard(held)
                continue
            await held.connection.close()

    async def discard(self, held: KeptConnection) -> None:
        """Drop a connection that broke, or that a cancelled group left in a transaction."""
        await held.connection.invalidate()
        await held.connection.close()
