"""Clock drift on a real PostgreSQL: a producer whose clock runs ahead gets one alert, one
a little behind none; both show on the metrics and in GraphQL; with
CAUSEWAY_MAX_FUTURE_S set, an event stamped too far ahead is refused."""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime, timedelta
from secrets import token_hex
from typing import Any

import httpx2
import orjson
import pytest
from fastapi import FastAPI
from prometheus_client import REGISTRY
from sqlalchemy.ext.asyncio import AsyncEngine

from app.projections.checkpoints import read_events, read_head
from app.projections.drift import DriftWatch
from app.settings import Settings
from tests.integration.conftest import catch_up
from tests.integration.events import BATCH, JSON, STRUCTURED, dumps, event

AHEAD, BEHIND = "/clocks/ahead", "/clocks/behind"


@pytest.fixture
def settings() -> Settings:
    return Settings(_env_file=None, drift_alert_s=1.0, max_future_s=60.0)


def stamped(source: str, offset_s: float) -> dict[str, Any]:
    """An event from a producer whose clock is ``offset_s`` ahead of ours (behind if < 0)."""
    at = datetime.now(UTC) + timedelta(seconds=offset_s)
    return event(source=source, time=at.isoformat().replace("+00:00", "Z"))


def drift_count(source: str) -> float:
    labels = {"tenant": "acme", "source": source}
    value = REGISTRY.get_sample_value("causeway_event_time_drift_seconds_count", labels)
    return value or 0.0


async def alerts(client: httpx2.AsyncClient) -> list[dict[str, Any]]:
    response = await client.get("/replay", params={"types": "causeway.alert.raised"})
    return [orjson.loads(line) for line in response.text.splitlines() if line]


async def test_a_clock_3_s_ahead_raises_one_alert_and_one_0_2_s_behind_none(
    app: FastAPI, client: httpx2.AsyncClient
) -> None:
    counted = {s: drift_count(s) for s in (AHEAD, BEHIND)}
    first = [stamped(AHEAD, 3.0) for _ in range(5)] + [stamped(BEHIND, -0.2) for _ in range(5)]
    assert (await client.post("/events", content=dumps(first), headers=BATCH)).status_code == 201
    await catch_up(app)
    # Still ahead in a later batch (and a later projection step): no second alert.
    for body in [stamped(AHEAD, 3.0), stamped(BEHIND, -0.2)]:
        response = await client.post("/events", content=dumps(body), headers=STRUCTURED)
        assert response.status_code == 201, response.text
    await catch_up(app)

    [alert] = await alerts(client)
    assert alert["causationid"] == first[0]["id"]  # the event that crossed the line
    assert alert["data"]["source"] == AHEAD
    assert alert["data"]["direction"] == "ahead"
    assert -3.5 < alert["data"]["median_drift_s"] < -2.1
    assert drift_count(AHEAD) - counted[AHEAD] == 6
    assert drift_count(BEHIND) - counted[BEHIND] == 6
    median = REGISTRY.get_sample_value(
        "causeway_source_drift_median_seconds", {"tenant": "acme", "source": BEHIND}
    )
    assert median is not None
    assert 0.19 < median < 0.9

    query = "query($id: ID!) { event(id: $id) { time recordedTime drift } }"
    asked = {"query": query, "variables": {"id": first[5]["id"]}}
    answer = await client.post("/graphql", content=dumps(asked), headers=JSON)
    got = answer.json()["data"]["event"]
    assert got["recordedTime"].endswith("Z")
    assert 0.19 < got["drift"] < 0.9


async def test_a_rebuild_raises_no_alert_again(app: FastAPI, client: httpx2.AsyncClient) -> None:
    body = [stamped(AHEAD, 3.0) for _ in range(3)]
    assert (await client.post("/events", content=dumps(body), headers=BATCH)).status_code == 201
    await catch_up(app)
    runner = app.state.runner
    [drift] = [p for p in runner.projections if p.name == "drift"]
    await runner.rebuild(drift)
    assert len(await alerts(client)) == 1


async def test_an_event_stamped_past_max_future_s_is_refused_naming_both_times(
    client: httpx2.AsyncClient,
) -> None:
    body = stamped(AHEAD, 120.0)
    response = await client.post("/events", content=dumps(body), headers=STRUCTURED)
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"].endswith("time-in-future")
    assert body["time"] in problem["detail"]
    assert "server's clock (20" in problem["detail"]  # the server's time, named
    near = stamped(AHEAD, 3.0)
    response = await client.post("/events", content=dumps(near), headers=STRUCTURED)
    assert response.status_code == 201


async def test_a_source_alerts_again_only_after_it_recovered(
    app: FastAPI, client: httpx2.AsyncClient
) -> None:
    # A sample per quarter second of recorded_at: each post below waits past one.
    for offset in (3.0, 0.0, 0.0, 3.0, 3.0, 3.0):
        response = await client.post(
            "/events", content=dumps(stamped(AHEAD, offset)), headers=STRUCTURED
        )
        assert response.status_code == 201, response.text
        await catch_up(app)
        await asyncio.sleep(0.26)
    # Medians: -3 (alert), -1.5 (still past 1 s), 0 (recovered), -1.5 (alert), -3, -3.
    assert len(await alerts(client)) == 2


async def test_causeways_own_events_are_neither_read_nor_counted_as_its_lag(
    app: FastAPI, client: httpx2.AsyncClient, engine: AsyncEngine
) -> None:
    # The alert the drift watch raises is Causeway's own event (stamped by this server's
    # clock): the watch's read passes it, and its status does not count it as lag.
    body = [stamped(AHEAD, 3.0) for _ in range(3)]
    assert (await client.post("/events", content=dumps(body), headers=BATCH)).status_code == 201
    runner = app.state.runner
    [drift] = [p for p in runner.projections if p.name == "drift"]
    await runner.catch_up(drift)
    [alert] = await alerts(client)
    async with engine.connect() as conn:
        head = await read_head(conn)
        read = await read_events(conn, drift, 0, head, 1000)
    assert [e.record.id for e in read] == [e["id"] for e in body]
    assert alert["position"] == head
    status = await runner.status(drift)
    assert status.checkpoint < head  # no event of its own came after the three
    assert status.lag_events == 0


# A source that sent events 10 s late and went quiet kept its median gauge at 10 until
# the process restarted: CausewayProducerClockDrift (5 minutes over 2 s) fired for ever.
async def test_a_quiet_sources_median_is_cleared_a_minute_on(engine: AsyncEngine) -> None:
    tenant = f"t{token_hex(4)}"
    watch = DriftWatch(max_sources=100)
    now_us = int(time.time() * 1e6)
    async with engine.begin() as conn:
        await watch.tally(conn, [(1, tenant, "e1", "/late", now_us, now_us - 10_000_000)])
        assert median_of(tenant, "/late") == 10.0
        soon = now_us + 30_000_000  # within its minute: its median holds
        await watch.tally(conn, [(2, tenant, "e2", "/ok", soon, soon)])
        assert median_of(tenant, "/late") == 10.0
        later = now_us + 600_000_000  # ten minutes on, only another source sends
        await watch.tally(conn, [(3, tenant, "e3", "/ok", later, later)])
        await conn.rollback()
    assert math.isnan(median_of(tenant, "/late") or 0.0)
    assert median_of(tenant, "/ok") == 0.0


def median_of(tenant: str, source: str) -> float | None:
    labels = {"tenant": tenant, "source": source}
    return REGISTRY.get_sample_value("causeway_source_drift_median_seconds", labels)
