"""Replay reads against PostgreSQL: how much one fetch of the named cursor holds."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.store import reads
from app.store.log import EventLog
from app.store.reads import EventReader
from app.store.records import EventFilter, NewEvent


async def fetches(engine: AsyncEngine, *, form: str, fetch_rows: int) -> list[int]:
    """The number of events each fetch of a replay of tenant ``acme`` brought."""
    async with engine.connect() as conn:
        reader = EventReader(conn)
        if form == "ndjson":
            chunks = reader.replay("acme", EventFilter(after=0), fetch_rows=fetch_rows)
            return [chunk.count async for chunk in chunks]
        rows = reader.replay_rows("acme", EventFilter(after=0), fetch_rows=fetch_rows)
        return [len(chunk) async for chunk in rows]


@pytest.mark.parametrize("form", ["ndjson", "parquet"])
async def test_a_fetch_holds_about_fetch_bytes_however_large_the_events(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    """A fetch of 1,000 events of a megabyte each held a gigabyte: the number of rows
    a fetch takes follows the size of the rows the fetch before brought (so the fetch
    where small rows turn large can still hold ``fetch_rows`` of them)."""
    monkeypatch.setattr(reads, "FIRST_FETCH_ROWS", 4)
    monkeypatch.setattr(reads, "FETCH_BYTES", 20_000)
    small = [NewEvent(id=f"s{i}", source="/s", type="t", stream="s") for i in range(40)]
    large = [
        NewEvent(id=f"l{i}", source="/s", type="t", stream="l", has_data=True, data="x" * 4000)
        for i in range(60)
    ]
    async with engine.begin() as conn:
        await EventLog(conn).append("acme", [*small, *large])
    sizes = await fetches(engine, form=form, fetch_rows=30)
    assert sum(sizes) == 100
    assert sizes[:3] == [4, 30, 30]  # small rows: as many as fetch_rows allows
    assert max(sizes[3:]) <= 5  # rows of 4 kB: about 20,000 bytes a fetch


async def test_a_stream_page_closes_its_cursor_before_it_answers(engine: AsyncEngine) -> None:
    """A page that ends before the stream does leaves no cursor open on its connection for
    a later finaliser to close, once the connection serves someone else."""
    more = [NewEvent(id=f"e{i}", source="/s", type="t", stream="s") for i in range(5)]
    async with engine.begin() as conn:
        await EventLog(conn).append("acme", more)
    async with engine.connect() as conn:
        page = await EventReader(conn).read_stream("acme", "s", from_version=1, limit=2)
        assert page.next_version == 3
        assert (await conn.exec_driver_sql("SELECT count(*) FROM pg_cursors")).scalar() == 0
