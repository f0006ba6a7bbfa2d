"""The wake-up hints that follow an appender's groups (``ingest.hints``): every group is
followed by one, none comes before its events can be read, and a burst of groups shares
a few."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest
from sqlalchemy import URL, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import libpq_conninfo
from app.store.log import NOTIFY_CHANNEL
from app.store.records import NewEvent
from ingest.appender import Appender


@pytest.fixture
async def listener(database_url: URL) -> AsyncIterator[psycopg.AsyncConnection[object]]:
    conninfo = libpq_conninfo(database_url)
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        yield conn


async def hints_until(
    listener: psycopg.AsyncConnection[object], engine: AsyncEngine, position: int
) -> list[str]:
    """The hints that arrive until one names ``position``; each checked against the log:
    the events it names are there to read when it arrives."""
    found: list[str] = []
    async for notice in listener.notifies(timeout=10):
        found.append(notice.payload)
        named = int(notice.payload.split()[0])
        async with engine.connect() as conn:
            head = await conn.scalar(text("SELECT coalesce(max(position), 0) FROM events"))
        assert head >= named, f"hint {notice.payload!r} came before its events"
        if named >= position:
            return found
    raise AssertionError(f"no hint named position {position}; got {found}")


def event(n: int, kind: str) -> NewEvent:
    return NewEvent(id=f"e-{n}", source="/s", type=kind, stream="s")


async def test_a_lone_append_is_followed_by_its_hint(
    engine: AsyncEngine, listener: psycopg.AsyncConnection[object]
) -> None:
    appender = Appender(engine, hint_window_s=60)
    try:
        await appender.append("acme", [event(1, "com.example.one")])
        assert await hints_until(listener, engine, 1) == ["1 com.example.one"]
    finally:
        await appender.close()


async def test_a_burst_of_groups_shares_one_hint_after_the_first(
    engine: AsyncEngine, listener: psycopg.AsyncConnection[object]
) -> None:
    """The first group's hint goes at once; the nineteen after it, within the window, get
    one at its end that names the head and every type they appended."""
    appender = Appender(engine, hint_window_s=1.0)
    try:
        for n in range(1, 21):
            await appender.append("acme", [event(n, f"com.example.t{n:02d}")])
        found = await hints_until(listener, engine, 20)
    finally:
        await appender.close()
    assert found == [
        "1 com.example.t01",
        "20 " + " ".join(f"com.example.t{n:02d}" for n in range(2, 21)),
    ]


async def test_closing_sends_the_hint_still_due(
    engine: AsyncEngine, listener: psycopg.AsyncConnection[object]
) -> None:
    appender = Appender(engine, hint_window_s=60)
    await appender.append("acme", [event(1, "first")])
    await appender.append("acme", [event(2, "second")])
    await appender.close()
    assert await hints_until(listener, engine, 2) == ["1 first", "2 second"]


async def test_hints_go_on_after_the_database_drops_their_connection(
    engine: AsyncEngine,
    listener: psycopg.AsyncConnection[object],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A hint that cannot be sent is dropped with a warning (readers poll); the appends go
    on, and the next hint goes out on a new connection, naming its types too."""
    appender = Appender(engine, hint_window_s=0)
    try:
        await appender.append("acme", [event(1, "first")])
        assert await hints_until(listener, engine, 1) == ["1 first"]
        async with engine.connect() as conn:
            await conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND query LIKE 'SELECT pg_notify%'"
                )
            )
        await appender.append("acme", [event(2, "second")])
        await appender.append("acme", [event(3, "third")])
        found = await hints_until(listener, engine, 3)
    finally:
        await appender.close()
    assert found[-1] == "3 second third"
    assert "a wake-up hint was not sent" in caplog.text
