"""Leadership (README: "one leader per projection across processes, through an advisory
lock"): a leader checks its lock's connection before each batch. It checked only when
idle, so a busy leader whose lock had died went on applying beside the new leader."""

from __future__ import annotations

import asyncio

from sqlalchemy import URL, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db.engine import create_engine
from app.projections.runner import ProjectionRunner
from app.store.log import EventLog
from app.store.records import NewEvent, StoredEvent


class Recorder:
    """Remembers which runner applied what; slow enough that a backlog lasts."""

    name = "recorder"
    tables = ()
    types = frozenset({"test.work"})

    def __init__(self, who: str, seen: list[tuple[str, int]]) -> None:
        self.who, self.seen = who, seen

    async def apply(self, conn: AsyncConnection, event: StoredEvent) -> None:
        await asyncio.sleep(0.01)
        self.seen.append((self.who, event.position))


async def advisory_holders(engine: AsyncEngine) -> list[int]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND database"
                " = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
        )
        return [r[0] for r in rows]


async def test_a_busy_leader_whose_lock_died_stops_leading(
    engine: AsyncEngine, database_url: URL
) -> None:
    async with engine.begin() as conn:
        await EventLog(conn).append(
            "acme",
            [NewEvent(id=f"w{i}", source="/s", type="test.work", stream="s") for i in range(600)],
        )
    seen: list[tuple[str, int]] = []
    a_engine = create_engine(database_url, pool_size=3)
    b_engine = create_engine(database_url, pool_size=3)
    a = ProjectionRunner(a_engine, [Recorder("a", seen)], batch_size=5, poll_interval_s=0.05)
    b = ProjectionRunner(b_engine, [Recorder("b", seen)], batch_size=5, poll_interval_s=0.05)
    tasks = [asyncio.create_task(a.run())]
    try:
        async with asyncio.timeout(20):
            while not await advisory_holders(engine) or not seen:
                await asyncio.sleep(0.02)
        # The leader's lock connection dies (a proxy or idle timeout, a network blip):
        # PostgreSQL releases the lock, and the standby takes the lead.
        async with engine.connect() as conn:
            for pid in await advisory_holders(engine):
                await conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        tasks.append(asyncio.create_task(b.run()))
        async with asyncio.timeout(20):
            while not any(who == "b" for who, _ in seen):
                await asyncio.sleep(0.02)
        b_started = next(n for n, (who, _) in enumerate(seen) if who == "b")
        await asyncio.sleep(1.0)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await a_engine.dispose()
        await b_engine.dispose()
    after = seen[b_started:]
    a_after = [p for who, p in after if who == "a"]
    # No event applied twice (the checkpoint row's lock serialises the batches) ...
    positions = [p for _, p in seen]
    assert len(positions) == len(set(positions))
    # ... and the deposed leader stopped once it lost its lock.
    assert not a_after, (
        f"after b took the lead, a (whose lock is gone) applied {len(a_after)} more events "
        f"beside b's {len(after) - len(a_after)}"
    )
