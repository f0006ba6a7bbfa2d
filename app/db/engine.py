"""Engines from a database URL. Only composition roots call these; the rest is handed one."""

from __future__ import annotations

from typing import Any

import orjson
from psycopg import AsyncConnection as PsycopgConnection
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
    generic_plans: bool = False,
    autocommit: bool = False,
) -> AsyncEngine:
    """``generic_plans``: prepared statements keep one generic plan instead of being
    planned again for each execution's parameters (``plan_cache_mode``), for an engine
    that runs statements whose best plan does not depend on their parameters.
    ``autocommit``: every statement stands alone, for an engine that only reads; its
    connections are set so once, not at every checkout. (They are still rolled back on
    return, which costs nothing on an idle connection: that is what finds a connection
    that died under a caller who used the driver directly, and drops it.)"""
    # Sessions in UTC, whatever the server's TimeZone: psycopg reads timestamptz in the
    # session's zone, and under a zone west of UTC a stored 0001-01-01T00:00:00Z (Go's
    # zero time) reads back as a year Python cannot hold.
    options = "-c TimeZone=UTC"
    if statement_timeout_ms:
        options += f" -c statement_timeout={statement_timeout_ms}"
    if generic_plans:
        options += " -c plan_cache_mode=force_generic_plan"
    return create_async_engine(
        async_url(url),
        pool_size=pool_size,
        json_serializer=_json_text,
        # orjson reads integers past 64 bits as floats; the chain hashes numbers as doubles,
        # so nothing that matters changes, and it decodes jsonb several times faster.
        json_deserializer=orjson.loads,
        connect_args={"options": options},
        **({"isolation_level": "AUTOCOMMIT"} if autocommit else {}),
    )


async def driver_of(conn: AsyncConnection) -> PsycopgConnection[Any]:
    """The psycopg connection under ``conn``, for the hot paths that skip SQLAlchemy's
    per-statement and per-row work (appends, walks, replays)."""
    raw = await conn.get_raw_connection()
    return raw.driver_connection  # type: ignore[return-value]  # psycopg under SQLAlchemy
