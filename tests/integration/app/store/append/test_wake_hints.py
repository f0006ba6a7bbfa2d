"""The wake-up hints that follow an appender's groups (``app.store.append.wake_hints``): every group is
followed by one, none comes before its group commits, and a burst of groups shares a few."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import URL, text
from sqlalchemy.ext.asyncio import AsyncEngine

import app.store.append.wake_hints as hints_module
from app.db.engine import create_engine, libpq_conninfo
from app.store.append.group_commit import Appender
from app.store.append.wake_hints import WakeHints
from app.store.append.writes import NOTIFY_CHANNEL, send_wake_hint
from app.store.records import NewEvent


@pytest.fixture
async def listener(database_url: URL) -> AsyncIterator[psycopg.AsyncConnection[object]]:
    conninfo = libpq_conninfo(database_url)
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        yield conn


async def hints_heard(
    listener: psycopg.AsyncConnection[object], *, until: int | None = None, within_s: float = 10
) -> list[str]:
    """The hints that arrive within ``within_s``, their lines joined by blanks; with
    ``until``, up to the one naming that position, which must come."""
    found: list[str] = []
    try:
        async with asyncio.timeout(within_s):
            async for notice in listener.notifies():
                found.append(notice.payload.replace("\n", " "))
                if until is not None and int(notice.payload.split("\n")[0]) >= until:
                    return found
    except TimeoutError:
        pass
    assert until is None, f"no hint named position {until}; got {found}"
    return found


def event(n: int, kind: str) -> NewEvent:
    return NewEvent(id=f"e-{n}", source="/s", type=kind, stream="s")


async def test_a_lone_append_is_followed_by_its_hint(
    engine: AsyncEngine, listener: psycopg.AsyncConnection[object]
) -> None:
    appender = Appender(engine, hint_window_s=60)
    try:
        await appender.append("acme", [event(1, "com.example.one")])
        assert await hints_heard(listener, until=1) == ["1 com.example.one"]
    finally:
        await appender.close()


async def test_a_burst_of_groups_shares_one_hint_after_the_first(
    engine: AsyncEngine, listener: psycopg.AsyncConnection[object]
) -> None:
    """The first group's hint goes at once; the nineteen after it, within the window, get
    one at its end that names the head and every type they appended."""
    appender = Appender(engine, hint_window_s=3.0)
    try:
        for n in range(1, 21):
            await appender.append("acme", [event(n, f"com.example.t{n:02d}")])
        found = await hints_heard(listener, until=20, within_s=15)
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
    assert await hints_heard(listener, until=2) == ["1 first", "2 second"]


async def test_a_hint_waits_for_the_commit_of_what_it_names(
    engine: AsyncEngine, database_url: URL, listener: psycopg.AsyncConnection[object]
) -> None:
    """A group held at the head (another transaction has it locked) sends no hint until
    it is committed."""
    appender = Appender(engine, hint_window_s=0)
    conninfo = libpq_conninfo(database_url)
    try:
        async with await psycopg.AsyncConnection.connect(conninfo) as blocker:
            await blocker.execute("SELECT position FROM log_head FOR UPDATE")
            held = asyncio.ensure_future(appender.append("acme", [event(1, "held")]))
            assert await hints_heard(listener, within_s=0.3) == []
            assert not held.done()
            await blocker.rollback()
        await held
        assert await hints_heard(listener, until=1) == ["1 held"]
    finally:
        await appender.close()


async def test_hints_go_on_after_the_database_drops_their_connection(
    engine: AsyncEngine, listener: psycopg.AsyncConnection[object]
) -> None:
    """The kept connection is gone (a restart, an idle timeout): the next hint goes on a
    new one, at once."""
    appender = Appender(engine, hint_window_s=0)
    try:
        await appender.append("acme", [event(1, "first")])
        assert await hints_heard(listener, until=1) == ["1 first"]
        async with engine.connect() as conn:
            await conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND query LIKE 'SELECT pg_notify%'"
                )
            )
        await appender.append("acme", [event(2, "second")])
        assert await hints_heard(listener, until=2) == ["2 second"]
    finally:
        await appender.close()


async def test_a_hint_that_cannot_be_sent_is_tried_again_with_what_landed_meanwhile(
    engine: AsyncEngine,
    listener: psycopg.AsyncConnection[object],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The database is away for three tries (a fresh connection each time): one warning,
    and once it is back the hint goes, naming what landed meanwhile too."""
    real = send_wake_hint
    failures = 3

    async def away_for_a_while(driver: Any, hint: str) -> None:
        nonlocal failures
        if failures:
            failures -= 1
            raise psycopg.OperationalError("the server closed the connection unexpectedly")
        await real(driver, hint)

    monkeypatch.setattr(hints_module, "send_wake_hint", away_for_a_while)
    hints = WakeHints(engine, window_s=0, retry_s=0.05)
    try:
        hints.landed(1, {"a"})
        await asyncio.sleep(0)  # on its way, to fail
        hints.landed(2, {"b"})
        assert await hints_heard(listener, until=2, within_s=2.0) == ["2 a b"]
    finally:
        await hints.close()
    assert failures == 0
    assert caplog.text.count("a wake-up hint was not sent") == 1


async def test_closing_without_a_database_gives_up_in_its_time() -> None:
    nowhere = create_engine("postgresql://causeway@127.0.0.1:1/none", pool_size=1)
    hints = WakeHints(nowhere, window_s=0, retry_s=0.05, close_timeout_s=1)
    try:
        hints.landed(1, {"a"})
        await asyncio.sleep(0.2)
        async with asyncio.timeout(5):
            await hints.close()
        assert nowhere.pool.checkedout() == 0  # type: ignore[attr-defined]  # QueuePool's
    finally:
        await nowhere.dispose()


async def test_a_group_that_lands_after_close_gets_no_hint_and_holds_no_connection(
    engine: AsyncEngine,
) -> None:
    hints = WakeHints(engine, window_s=0)
    hints.landed(1, {"a"})
    await hints.close()
    hints.landed(2, {"b"})
    await asyncio.sleep(0.05)
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]  # QueuePool's count
