"""``causeway verify`` holds a bounded share of the log at a time, whatever the events'
size: their data as text for one fetch (``fetch_bytes`` at most, events being at most
``largest_event_bytes``), and one event's data as Python objects (half a megabyte of JSON
is some 14 times that once parsed); small events before large ones change nothing."""

from __future__ import annotations

import tracemalloc

import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

from app.store.log import EventLog
from app.store.records import NewEvent
from app.store.verify import verify_chain

EVENTS = 40
BUDGET = 4 << 20  # bytes of event text a fetch may hold


def small(n: int) -> NewEvent:
    return NewEvent(id=f"s{n}", source="/s", type="t", stream="s", has_data=True, data={"n": n})


def large(n: int) -> NewEvent:
    """An event of about half a megabyte of JSON, in many small objects."""
    data = {"samples": [{"i": i, "label": f"box-{n}-{i}"} for i in range(20_000)]}
    return NewEvent(id=f"e{n}", source="/s", type="t", stream="s", has_data=True, data=data)


async def test_verify_holds_one_fetch_of_text_and_one_parsed_event(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:  # small ones first: a fetch is not sized by them
        await EventLog(conn).append("acme", [small(n) for n in range(100)])
    for start in range(0, EVENTS, 10):
        async with engine.begin() as conn:
            await EventLog(conn).append("acme", [large(n) for n in range(start, start + 10)])
    one_event = len(orjson.dumps(large(0).data))
    assert one_event > 400_000
    async with engine.connect() as conn:
        tracemalloc.start()
        try:
            report = await verify_chain(conn, largest_event_bytes=600_000, fetch_bytes=BUDGET)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert report.is_intact
    assert report.count == 100 + EVENTS
    # Every event loaded at once held 40 of them parsed: 223 MiB.
    assert peak < BUDGET + 30 * one_event, f"{peak / 2**20:.0f} MiB at the peak"
