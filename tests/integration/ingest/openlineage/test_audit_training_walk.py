"""An audit walks upstream from the training runs of its models (docs/openlineage.md).
It walked from each run alone: runs that read one feature set built from thousands of
tables each read all of it again (an audit of a model trained by 80 such runs answered
TIMEOUT, "lower maxDepth or limit", neither of which was the cause). And chainVerified
covered events of the runs upstream (the run that wrote the training data) that the
answer never listed: one forged there turned the badge red while every event listed
verified. One walk from every run at once now, and the answer lists every event it
checked (``trainingEvents``)."""

from __future__ import annotations

from typing import Any

import httpx2
import orjson
import psycopg
import pytest
from sqlalchemy import URL

import app.store.lineage as lineage
from app.store.graph import walk_from
from tests.integration.events import JSON, STRUCTURED, dumps, event, registration
from tests.integration.forgery import position_of
from tests.integration.ingest.openlineage.shapes import dataset, new_run, run_event

CHEAP = "query ($id: ID!) { audit(decisionId: $id) { chainVerified truncated } }"


async def lineage_event(client: httpx2.AsyncClient, sent: dict[str, Any]) -> None:
    answer = await client.post("/api/v1/lineage", content=orjson.dumps(sent), headers=JSON)
    assert answer.status_code == 201, answer.text


async def trained_by(admin: httpx2.AsyncClient, runs: list[str]) -> None:
    """Model m version 1, trained by every run of ``runs``."""
    first = await admin.post(
        "/models/m/versions", content=registration("1", training_run=runs[0]), headers=JSON
    )
    assert first.status_code == 201, first.text
    for run in runs[1:]:
        more = await admin.post("/models/m/versions/1/training-runs", json={"run_id": run})
        assert more.status_code in (200, 201), more.text


async def decided(client: httpx2.AsyncClient) -> str:
    """A decision caused by an event of model m version 1: its id."""
    used = event(modelname="m", modelversion="1")
    decision = event(causationid=used["id"])
    for sent in (used, decision):
        answer = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        assert answer.status_code == 201, answer.text
    return str(decision["id"])


async def audit(client: httpx2.AsyncClient, decision: str, query: str) -> Any:
    answer = await client.post("/graphql", json={"query": query, "variables": {"id": decision}})
    body = answer.json()
    assert "errors" not in body, body
    return body["data"]["audit"]


async def shared_upstream(
    client: httpx2.AsyncClient, admin: httpx2.AsyncClient, *, tables: int, runs: int
) -> str:
    """A prep run reads ``tables`` source tables and writes feat; ``runs`` runs each read
    feat and train m 1; a decision uses m 1."""
    raws = [dataset("s3://wide", f"raw-{i}") for i in range(tables)]
    feat = dataset("s3://wide", "feat")
    await lineage_event(
        client, run_event("COMPLETE", new_run(), "prep", inputs=raws, outputs=[feat])
    )
    trained = [new_run() for _ in range(runs)]
    for run in trained:
        await lineage_event(client, run_event("COMPLETE", run, "train", inputs=[feat]))
    await trained_by(admin, trained)
    return await decided(client)


async def test_runs_that_share_their_data_are_walked_once(
    client: httpx2.AsyncClient, admin: httpx2.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    decision = await shared_upstream(client, admin, tables=500, runs=20)
    loaded: list[int] = []

    async def counted(*args: Any, **kwargs: Any) -> Any:
        found = await walk_from(*args, **kwargs)
        loaded.append(0 if found is None else len(found.nodes))
        return found

    monkeypatch.setattr(lineage, "walk_from", counted)
    query = (
        "query ($id: ID!) { audit(decisionId: $id) { datasets { name } trainingEvents { id } } }"
    )
    found = await audit(client, decision, query)
    assert len(found["datasets"]) == 501  # the 500 tables and feat
    # The 20 COMPLETEs, feat's version, the prep run's COMPLETE, the 500 tables' versions.
    assert len(found["trainingEvents"]) == 20 + 1 + 1 + 500
    assert loaded == [522]  # one walk, each event read once (it read 20 x 503)


async def test_an_audit_of_a_model_trained_by_many_runs_on_shared_data_answers(
    client: httpx2.AsyncClient, admin: httpx2.AsyncClient
) -> None:
    decision = await shared_upstream(client, admin, tables=3000, runs=80)
    found = await audit(client, decision, CHEAP)
    assert found == {"chainVerified": True, "truncated": False}


async def test_a_red_badge_blames_an_event_the_audit_lists(
    client: httpx2.AsyncClient, admin: httpx2.AsyncClient, database_url: URL
) -> None:
    prep, train = new_run(), new_run()
    raw, feat = dataset("s3://f", "raw"), dataset("s3://f", "feat")
    await lineage_event(client, run_event("START", prep, "prep", inputs=[raw]))
    await lineage_event(client, run_event("COMPLETE", prep, "prep", outputs=[feat]))
    await lineage_event(client, run_event("START", train, "train", inputs=[feat]))
    await lineage_event(client, run_event("COMPLETE", train, "train"))
    await trained_by(admin, [train])
    decision = await decided(client)
    query = """
    query ($id: ID!) { audit(decisionId: $id) {
      decision { id } sourceEvents { id } derivedEvents { id } models { events { id } }
      trainingRuns { run { events { id } } } datasets { event { id } } trainingEvents { id }
      chainVerified } }
    """
    assert (await audit(client, decision, query))["chainVerified"] is True
    dsn = database_url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        start = conn.execute(
            "SELECT id FROM events WHERE stream = %s ORDER BY stream_version LIMIT 1",
            (f"openlineage:run:{prep}",),
        ).fetchone()
        assert start is not None
        forged = str(start[0])
        conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        conn.execute(
            "UPDATE events SET hash = sha256(hash) WHERE position = %s",
            (position_of(database_url, forged),),
        )
        conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
    after = await audit(client, decision, query)
    assert after["chainVerified"] is False
    assert forged in {e["id"] for e in after["trainingEvents"]}  # the event it blames
