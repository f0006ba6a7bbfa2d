"""Events of one stream take turns; the map of locks holds only the streams in use."""

from __future__ import annotations

import asyncio

import pytest

from ingest.openlineage.locks import StreamLocks

RUN = "openlineage:run:1"


async def _hold(locks: StreamLocks, tenant: str, asking: asyncio.Event, log: list[str]) -> None:
    asking.set()  # then blocks on the lock, if another holds it, before the caller wakes
    async with locks.holding(tenant, RUN):
        log.append(tenant)


async def test_blocks_of_one_stream_run_one_after_the_other() -> None:
    locks, asking = StreamLocks(), asyncio.Event()
    log: list[str] = []
    async with locks.holding("acme", RUN):
        waiter = asyncio.create_task(_hold(locks, "acme", asking, log))
        await asking.wait()
        assert log == []  # it waits while the stream is held
        assert len(locks) == 1
    await waiter
    assert log == ["acme"]
    assert len(locks) == 0


async def test_other_streams_and_tenants_do_not_wait() -> None:
    locks, asking = StreamLocks(), asyncio.Event()
    log: list[str] = []
    async with locks.holding("acme", RUN), locks.holding("acme", "openlineage:run:2"):
        await _hold(locks, "other", asking, log)
        assert log == ["other"]
        assert len(locks) == 2
    assert len(locks) == 0


async def test_a_waiter_cancelled_or_failing_leaves_no_lock_behind() -> None:
    locks, asking = StreamLocks(), asyncio.Event()
    async with locks.holding("acme", RUN):
        waiter = asyncio.create_task(_hold(locks, "acme", asking, []))
        await asking.wait()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert len(locks) == 1
    assert len(locks) == 0
    with pytest.raises(RuntimeError):
        async with locks.holding("acme", RUN):
            raise RuntimeError("the append failed")
    assert len(locks) == 0
