"""Engines from a database URL. Only composition roots call these; the rest is handed one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from psycopg import AsyncConnection as PsycopgConnection
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine


def _json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


def async_url(url: str | URL) -> URL:
    """``url`` with the psycopg 3 driver, whatever driver it named."""
    # make_url, not str(): str() of a URL masks its password.
    return make_url(url).set(drivername="postgresql+psycopg")


def create_engine(
    url: str | URL,
    *,
    pool_size: int = 5,
    statement_timeout_ms: int = 30_000,
) -> AsyncEngine:
    options = _session_options(statement_timeout_ms, generic_plans=False)
    return create_async_engine(
        async_url(url),
        pool_size=pool_size,
        json_serializer=_json_text,
        # orjson reads integers past 64 bits as floats; the chain hashes numbers as doubles,
        # so nothing that matters changes, and it decodes jsonb several times faster.
        json_deserializer=orjson.loads,
        connect_args={"options": options},
    )


def _session_options(statement_timeout_ms: int, *, generic_plans: bool) -> str:
    """``generic_plans``: prepared statements keep one generic plan instead of being
    planned again for each execution's parameters (``plan_cache_mode``), for sessions
    that run statements whose best plan does not depend on their parameters."""
    # Sessions in UTC, whatever the server's TimeZone: psycopg reads timestamptz in the
    # session's zone, and under a zone west of UTC a stored 0001-01-01T00:00:00Z (Go's
    # zero time) reads back as a year Python cannot hold.
    options = "-c TimeZone=UTC"
    if statement_timeout_ms:
        options += f" -c statement_timeout={statement_timeout_ms}"
    if generic_plans:
        options += " -c plan_cache_mode=force_generic_plan"
    return options


class DriverPool:
    """psycopg connections with no SQLAlchemy around them, in autocommit, for reads that
    go straight to the driver and stand alone (GraphQL's walks): SQLAlchemy's checkout
    and return (greenlets, pool events, the reset) took a quarter of a millisecond of
    each audit, psycopg_pool's a fiftieth. Sessions are set as ``create_engine`` sets
    them. The pool opens on first use and closes with ``close``; a connection that broke
    under its user is dropped when it comes back, and replaced."""

    def __init__(
        self,
        url: str | URL,
        *,
        min_size: int,
        max_size: int,
        statement_timeout_ms: int,
        generic_plans: bool = False,
        name: str | None = None,
    ) -> None:
        self._pool = AsyncConnectionPool(
            make_url(url).set(drivername="postgresql").render_as_string(hide_password=False),
            min_size=min_size,
            max_size=max_size,
            kwargs={
                "autocommit": True,
                "options": _session_options(statement_timeout_ms, generic_plans=generic_plans),
            },
            open=False,
            name=name,
        )

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[PsycopgConnection[Any]]:
        if self._pool.closed:
            await self._pool.open()  # concurrent first users: the pool opens once
        async with self._pool.connection() as conn:
            yield conn

    async def close(self) -> None:
        await self._pool.close()


async def driver_of(conn: AsyncConnection) -> PsycopgConnection[Any]:
    """The psycopg connection under ``conn``, for the hot paths that skip SQLAlchemy's
    per-statement and per-row work (appends, walks, replays)."""
    raw = await conn.get_raw_connection()
    return raw.driver_connection  # type: ignore[return-value]  # psycopg under SQLAlchemy
