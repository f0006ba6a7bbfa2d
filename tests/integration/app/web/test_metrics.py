"""``GET /metrics`` on a real PostgreSQL: what each part counts, labelled by route
template and bounded tenant, and every metric ``deploy/prometheus/alerts.yml`` names."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from secrets import token_hex

import psycopg
import pytest
from fastapi import FastAPI
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import URL
from sqlalchemy.exc import OperationalError

from app.db.engine import create_engine
from app.main import create_app, dispose
from app.settings import Settings
from app.store.append.group_commit import Appender
from app.store.failures import as_app_error
from app.store.records import NewEvent
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import STRUCTURED, dumps, event
from tests.integration.process import free_port
from tests.integration.scheduler.conftest import define, post

ALERTS = Path(__file__).parents[4] / "deploy" / "prometheus" / "alerts.yml"
KEDA = Path(__file__).parents[4] / "deploy" / "autoscaling" / "keda-workers.yml"


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition: (name, labels) to value."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
async def relaying_app(settings: Settings, database_url: URL) -> AsyncIterator[FastAPI]:
    """An app that relays to NATS (not started: the relay's lag is read from the log)."""
    app = create_app(
        settings.model_copy(update={"nats_url": "nats://127.0.0.1:4222"}), database_url=database_url
    )
    yield app
    await dispose(app)


async def test_metrics_count_appends_by_outcome_and_time_requests_by_template(
    relaying_app: FastAPI, make_key: MakeKey
) -> None:
    tenant = f"t{token_hex(4)}"  # the counters are the process's: a tenant of this test's own
    async with asgi_client(relaying_app, await make_key(tenant, "ingest,read,admin")) as client:
        first = event(subject="cam")
        effect = event(subject="cam", causationid=first["id"])
        for body in (first, first, effect, event(subject="cam", expectedversion=0)):
            await client.post("/events", content=dumps(body), headers=STRUCTURED)
        appends = samples((await client.get("/metrics")).text)
        assert (await client.get(f"/events/{first['id']}")).status_code == 200
        walk = (
            f'{{ lineage(id: "{first["id"]}", direction: DOWNSTREAM, limit: 0) {{ truncated }} }}'
        )
        asked = await client.post("/graphql", json={"query": walk})
        assert asked.json()["data"]["lineage"]["truncated"] is True
        await define(client, id="r", types=["job"], kind="k", queue="q")
        await post(client, type="job")
        await catch_up(relaying_app)
        answer = await client.get("/metrics")
        # GraphQL over GET and the OpenAPI document are routes, not an unmatched path.
        assert (await client.get("/graphql", params={"query": "{ __typename }"})).status_code == 200
        assert (await client.get("/openapi.json")).status_code == 200
        again = samples((await client.get("/metrics")).text)
    assert answer.status_code == 200
    found = samples(answer.text)
    appended = "causeway_events_appended_total"
    assert value(appends, appended, tenant=tenant, outcome="stored") == 2
    assert value(appends, appended, tenant=tenant, outcome="duplicate") == 1
    assert value(appends, appended, tenant=tenant, outcome="refused") == 1  # version conflict
    timed = "causeway_http_request_duration_seconds_count"
    assert value(found, timed, route="/events", method="POST", status="2xx") >= 3
    assert value(found, timed, route="/events", method="POST", status="4xx") >= 1
    assert value(found, timed, route="/events/{event_id}", method="GET", status="2xx") >= 1
    assert not any(first["id"] in dict(labels).get("route", "") for _, labels in found)
    ready = [v for (name, labels), v in found.items() if name == "causeway_queue_ready_tasks"]
    assert sum(ready) == 1
    assert value(found, "causeway_append_group_events_count") >= 1
    assert value(found, "causeway_graphql_walk_duration_seconds_count", outcome="ok") >= 1
    assert value(found, "causeway_graphql_walk_truncations_total", kind="lineage") >= 1
    assert value(found, timed, route="/graphql", method="POST", status="2xx") >= 1
    unmatched = value(found, timed, route="unmatched", method="GET", status="2xx")
    assert value(again, timed, route="/graphql", method="GET", status="2xx") >= 1
    assert value(again, timed, route="/openapi.json", method="GET", status="2xx") >= 1
    assert value(again, timed, route="unmatched", method="GET", status="2xx") == unmatched
    assert ("causeway_db_pool_connections_in_use", frozenset({("pool", "main")})) in found
    assert ("causeway_relay_lag_events", frozenset({("stream", "CAUSEWAY")})) in found
    lags = {
        dict(labels)["projection"]
        for name, labels in found
        if name == "causeway_projection_lag_events"
    }
    assert {p.name for p in relaying_app.state.runner.projections} == lags

    # The names in the rules (their comments aside): five rules name at least five.
    rules = [line for line in ALERTS.read_text().splitlines() if not line.strip().startswith("#")]
    named = {n for line in rules for n in re.findall(r"\bcauseway_[a-z_]+", line)}
    assert len(named) >= 5
    exposed = {name for name, _ in found} | {
        family.name for family in text_string_to_metric_families(answer.text)
    }
    assert named <= exposed, f"alerts.yml names metrics /metrics lacks: {named - exposed}"
    # And the KEDA example's query (ready and in-flight tasks).
    query = [line for line in KEDA.read_text().splitlines() if not line.strip().startswith("#")]
    scaled_on = {n for line in query for n in re.findall(r"\bcauseway_[a-z_]+", line)}
    assert scaled_on == {"causeway_queue_ready_tasks", "causeway_queue_in_flight_tasks"}
    assert scaled_on <= exposed


async def test_a_tenants_scrape_names_no_other_tenant_nor_its_sources(
    relaying_app: FastAPI, make_key: MakeKey
) -> None:
    mine, theirs = f"t{token_hex(4)}", f"t{token_hex(4)}"
    now = datetime.now(UTC).isoformat()  # an event with a time feeds the drift series
    async with asgi_client(relaying_app, await make_key(theirs, "ingest")) as client:
        secret = f"/their/camera-{token_hex(4)}"
        answer = await client.post(
            "/events", content=dumps(event(source=secret, time=now)), headers=STRUCTURED
        )
        assert answer.status_code == 201
    async with asgi_client(relaying_app, await make_key(mine, "ingest,read")) as client:
        await client.post(
            "/events", content=dumps(event(source="/mine", time=now)), headers=STRUCTURED
        )
        await catch_up(relaying_app)  # the drift projection has seen both
        answer = await client.get("/metrics")
    assert answer.status_code == 200
    assert theirs not in answer.text
    assert secret not in answer.text
    found = samples(answer.text)
    assert value(found, "causeway_events_appended_total", tenant=mine, outcome="stored") == 1
    drift = "causeway_event_time_drift_seconds_count"
    assert value(found, drift, tenant=mine, source="/mine") == 1
    shown = {dict(labels).get("tenant") for _, labels in found} - {None}
    assert shown <= {mine, "other"}


async def test_tenants_past_the_bound_are_counted_as_other(
    settings: Settings, database_url: URL, make_key: MakeKey
) -> None:
    from app.telemetry import metrics

    app = create_app(
        settings.model_copy(update={"metrics_max_tenants": 0}), database_url=database_url
    )
    tenant = f"t{token_hex(4)}"
    try:
        async with asgi_client(app, await make_key(tenant, "ingest,read")) as client:
            scrape = await client.get("/metrics")
            before = value(
                samples(scrape.text),
                "causeway_events_appended_total",
                tenant="other",
                outcome="stored",
            )
            await client.post("/events", content=dumps(event()), headers=STRUCTURED)
            found = samples((await client.get("/metrics")).text)
        assert (
            value(found, "causeway_events_appended_total", tenant="other", outcome="stored")
            == before + 1
        )
        assert value(found, "causeway_events_appended_total", tenant=tenant, outcome="stored") == 0
    finally:
        metrics.configure(max_tenants=settings.metrics_max_tenants)
        await dispose(app)


# An append the store could not answer (the database unreachable) was counted nowhere,
# and one cut off by the server stopping as refused, beside unknown causes and conflicts.
async def test_an_append_the_database_never_answered_counts_as_failed(
    database_url: URL,
) -> None:
    tenant = f"t{token_hex(4)}"
    gone = database_url.set(port=free_port())  # nothing listens there
    engine = create_engine(gone, pool_size=1, pool_timeout_s=1)
    appender = Appender(engine)
    try:
        with pytest.raises(OperationalError):  # the driver's: the route names it (503)
            await appender.append(tenant, [NewEvent(id="e", source="/s", type="t", stream="s")])
    finally:
        await appender.close()
        await engine.dispose()
    counted = REGISTRY.get_sample_value(
        "causeway_events_appended_total", {"tenant": tenant, "outcome": "failed"}
    )
    assert counted == 1
    refused = {"tenant": tenant, "outcome": "refused"}
    assert not REGISTRY.get_sample_value("causeway_events_appended_total", refused)


# A value PostgreSQL refuses (a stream too long for its index: SQLSTATE 54000) is answered
# 400, but was counted as failed: the outcome operators alert on as the database down.
@pytest.mark.parametrize("plan_ahead", [True, False])
async def test_an_append_postgresql_refuses_counts_as_refused(
    database_url: URL, plan_ahead: bool
) -> None:
    tenant = f"t{token_hex(4)}"
    engine = create_engine(database_url, pool_size=2)
    appender = Appender(engine, plan_ahead=plan_ahead)
    try:
        await appender.append(tenant, [NewEvent(id="a", source="/s", type="t", stream="s")])
        too_long = NewEvent(id="b", source="/s", type="t", stream=token_hex(4000))
        with pytest.raises(psycopg.errors.ProgramLimitExceeded) as refused:
            await appender.append(tenant, [too_long])
    finally:
        await appender.close()
        await engine.dispose()
    answer = as_app_error(refused.value)
    assert answer is not None
    assert answer.status == 400
    outcomes = {
        outcome: REGISTRY.get_sample_value(
            "causeway_events_appended_total", {"tenant": tenant, "outcome": outcome}
        )
        or 0
        for outcome in ("stored", "refused", "failed")
    }
    assert outcomes == {"stored": 1, "refused": 1, "failed": 0}
