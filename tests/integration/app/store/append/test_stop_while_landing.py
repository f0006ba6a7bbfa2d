"""Every request the writer took is answered when the server stops, also one whose group,
planned ahead, failed and was being let go of (its connection dropped, the others reset)
just then: it was off the list of groups on their way and not yet answered, so its
append waited until the shutdown's grace ran out."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

import app.store.append.group_commit as group_commit
from app.errors import Unavailable
from app.store.append.group_commit import Appender
from app.store.records import NewEvent


def ev(event_id: str) -> NewEvent:
    return NewEvent(id=event_id, source="/s", type="t", stream="s")


async def test_a_stop_while_a_failed_group_drops_its_connection_answers_its_requests(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    appender = Appender(engine, quiet_groups=1)
    for n in range(3):  # planned ahead from here on
        await appender.append("acme", [ev(f"w{n}")])
    assert appender.groups_planned_ahead > 0

    async def lost(*args: Any, **kwargs: Any) -> None:  # the database went away
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    dropping = asyncio.Event()
    release = appender._held.release

    async def slow_release() -> None:  # its RESET round trips, to a server that is away
        dropping.set()
        await asyncio.sleep(5)
        await release()

    monkeypatch.setattr(group_commit, "write_group", lost)
    monkeypatch.setattr(group_commit, "write_shared", lost)
    monkeypatch.setattr(appender._held, "release", slow_release)
    answer = asyncio.ensure_future(appender.append("acme", [ev("x")]))
    await asyncio.wait_for(dropping.wait(), timeout=5)
    writer = appender._writer
    assert writer is not None
    writer.cancel()  # the server stops
    await asyncio.wait([writer], timeout=10)
    await asyncio.sleep(0)  # the answer's callbacks
    try:
        assert answer.done(), "the request taken by the writer was never answered"
        assert isinstance(answer.exception(), psycopg.OperationalError | Unavailable)
    finally:
        answer.cancel()
        monkeypatch.undo()
        await appender.close()
