"""Large OpenLineage events: a run naming tens of thousands of datasets, an event of
about a mebibyte, which the schema takes a while to validate, and large events of
thousands of errors, which it must refuse at once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import orjson

from tests.integration.ingest.openlineage.shapes import dataset, new_run, run_event, schema

JSON = {"Content-Type": "application/json"}


async def post(client: httpx2.AsyncClient, event: dict[str, Any]) -> httpx2.Response:
    return await client.post("/api/v1/lineage", content=orjson.dumps(event), headers=JSON)


def _named(count: int, prefix: str) -> list[dict[str, Any]]:
    return [{"namespace": "", "name": f"{prefix}{i:x}"} for i in range(count)]


# A COMPLETE takes in the datasets its run's earlier events named, and they were looked
# up with a parameter each: past 65,535 a driver error, answered 503 "retry", for ever.
async def test_a_complete_after_events_naming_66_000_datasets_is_stored(
    client: httpx2.AsyncClient,
) -> None:
    run = new_run()
    for second, prefix in enumerate(("a", "b")):
        sent = run_event("RUNNING", run, "wide", outputs=_named(22_000, prefix))
        sent["eventTime"] = f"2026-11-02T10:00:0{second}Z"
        answer = await post(client, sent)
        assert answer.status_code == 201, answer.text[:300]
    complete = run_event(
        "COMPLETE", run, "wide", outputs=_named(22_000, "c"), time="2026-11-02T10:05:00Z"
    )
    answer = await post(client, complete)
    assert answer.status_code == 201, answer.text[:300]
    assert len(answer.json()["events"]) == 1 + 66_000  # the event, and a version each


@contextlib.asynccontextmanager
async def loop_gaps() -> AsyncIterator[list[float]]:
    """The gaps between ticks of a 10 ms timer on the event loop while the block runs: how
    long the loop stood still at a time."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticking = asyncio.create_task(tick())
    await asyncio.sleep(0.05)
    try:
        yield gaps
    finally:
        done.set()
        await ticking


# Validated on the event loop, an event of about 1 MiB held every other request of the
# process for about 2 s.
async def test_a_large_event_leaves_the_event_loop_free(client: httpx2.AsyncClient) -> None:
    inputs = [dataset("s3://l", f"t{i}", schema=schema("a")) for i in range(3800)]
    stood: list[str] = []
    # Three tries, one to pass: the other test worker sharing the machine's two cores can
    # stretch the store's own work on the loop (planning the event's 3,800 dataset
    # versions) past half of one request (1.34 s of 2.42 in CI); checks held on the loop
    # stand it still for most of every request.
    for _ in range(3):
        body = orjson.dumps(run_event("RUNNING", new_run(), "wide", inputs=inputs))
        assert len(body) < 1 << 20
        async with loop_gaps() as gaps:
            started = time.perf_counter()
            answer = await client.post("/api/v1/lineage", content=body, headers=JSON)
            took_s = time.perf_counter() - started
        assert answer.status_code == 201, answer.text[:300]
        if max(gaps) < took_s / 2:
            return
        stood.append(f"{max(gaps):.2f} s of {took_s:.2f} s")
    raise AssertionError(f"the loop stood still {', '.join(stood)}")


async def test_an_event_of_thousands_of_wrong_items_is_refused_at_once(
    client: httpx2.AsyncClient,
) -> None:
    """Half the 1 MiB event cap of ``"inputs": [1, 1, ...]``: every error of every item was
    collected to find the first (about 150 us and 10 KB each): 8 s and 0.7 GB at 128 KB,
    90 s and 5 GB at 1 MiB, for one request."""
    event = run_event("START", new_run(), "hostile")
    event["inputs"] = [1] * 250_000
    body = orjson.dumps(event)
    assert (1 << 20) // 4 < len(body) < (1 << 20) // 2
    started = time.perf_counter()
    answer = await client.post("/api/v1/lineage", content=body, headers=JSON)
    took_s = time.perf_counter() - started
    assert answer.status_code == 422, answer.text[:300]
    assert answer.json()["errors"][0]["pointer"] == "#/inputs/0"
    assert took_s < 10, f"a 422 for {len(body)} bytes took {took_s:.1f} s"


async def test_a_small_event_of_wrong_items_leaves_the_event_loop_free(
    client: httpx2.AsyncClient,
) -> None:
    """A body under 64 KiB is checked on the event loop ("a few ms at most"): 60 KB of
    ``"inputs": [1, 1, ...]`` held it for 4 s, and every other request waited."""
    event = run_event("START", new_run(), "hostile")
    event["inputs"] = [1] * 30_000
    body = orjson.dumps(event)
    assert len(body) <= 64 * 1024
    async with loop_gaps() as gaps:
        answer = await client.post("/api/v1/lineage", content=body, headers=JSON)
    assert answer.status_code == 422
    assert max(gaps) < 1.0, f"the event loop stood still {max(gaps):.1f} s"
