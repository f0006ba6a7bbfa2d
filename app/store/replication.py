"""What a read replica has of the log, and connections that leave a replica that is gone.

A replica is a physical standby of the primary (PostgreSQL streaming replication): the
same tables, as of the last WAL it replayed. Where it stands is its ``log_head``
position: the head row is written in the transaction of every append, so a replica
whose head is at P shows every event up to P, and everything else those transactions
wrote (a command's rows, a projection's checkpoint and read model).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime

from sqlalchemy import bindparam, make_url, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db.deadlines import within
from app.db.engine import DriverStatement
from app.db.tables import events, log_head

# How long a replica may take to give a connection (a pooled one is pinged first) before
# it is taken as gone: a server frozen, or cut off by a partition that drops packets,
# never refuses; it just never answers.
ANSWER_S = 2.0


_HEAD = DriverStatement.of(select(log_head.c.position))
_RECORDED_AT = DriverStatement.of(
    select(events.c.recorded_at).where(events.c.position == bindparam("position"))
)


async def read_head(conn: AsyncConnection) -> int:
    """The position of the log's last event, as this database shows it."""
    row = await _HEAD.first(conn)
    return 0 if row is None else int(row[0])


async def read_age_s(conn: AsyncConnection, position: int) -> float:
    """Seconds since the event at ``position`` was recorded (0 when there is none): on the
    primary, for the first event a replica lacks, how far behind in time it is."""
    row = await _RECORDED_AT.first(conn, position=position)
    if row is None:
        return 0.0
    recorded_at: datetime = row[0]
    return max((datetime.now(UTC) - recorded_at).total_seconds(), 0.0)


def replica_name(url: str) -> str:
    """A replica's name for logs and metrics: host, port and database, no credentials."""
    parsed = make_url(url)
    host = parsed.host or parsed.query.get("host") or "localhost"
    return f"{host}:{parsed.port or 5432}/{parsed.database or ''}"


async def _connected(engine: AsyncEngine) -> AsyncConnection:
    return await engine.connect()


async def _close(conn: AsyncConnection) -> None:
    await conn.close()


class FallbackConnector:
    """Connections to a replica's ``engine``; when one cannot be had (the replica is down,
    its pooled connections broke and it refuses new ones, or it gives none within
    ``ANSWER_S``), a connection to ``fallback`` (the primary's engine) instead, and
    ``on_failure`` is told. A read that has its connection runs where it got it: one that
    fails mid-way fails."""

    def __init__(
        self,
        engine: AsyncEngine,
        fallback: AsyncEngine,
        on_failure: Callable[[BaseException], None],
    ) -> None:
        self.engine = engine
        self._fallback = fallback
        self._on_failure = on_failure

    def connect(self) -> AbstractAsyncContextManager[AsyncConnection]:
        return self._connected()

    @asynccontextmanager
    async def _connected(self) -> AsyncIterator[AsyncConnection]:
        try:
            conn = await within(_connected(self.engine), ANSWER_S, left=_close)
        except (DBAPIError, OSError) as exc:  # TimeoutError is an OSError
            self._on_failure(exc)
            conn = await self._fallback.connect()
        try:
            yield conn
        finally:
            await conn.close()
