"""The ``audit walk`` span's attributes (docs/observability.md, Spans)."""

from __future__ import annotations

import httpx2
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.integration.events import JSON, STRUCTURED, dumps, event, registration
from tests.integration.ingest.openlineage.shapes import dataset, new_run, run_event
from tests.integration.ingest.openlineage.test_router import post as post_lineage


async def test_an_audit_walk_span_says_truncated_when_the_answer_is(
    client: httpx2.AsyncClient, admin: httpx2.AsyncClient, spans: InMemorySpanExporter
) -> None:
    """``causeway.walk.truncated`` says what the answer says (and what
    ``causeway_graphql_walk_truncations_total`` counts): the training runs' walks too. It
    was the decision's own walk's alone: an audit answered ``truncated: true`` had a
    span that says it was not."""
    run = new_run()
    made = await post_lineage(
        client, run_event("COMPLETE", new_run(), "prep", outputs=[dataset("s3://x", "d")])
    )
    assert made.status_code == 201, made.text
    for state in ("START", "RUNNING", "COMPLETE"):
        sent = await post_lineage(
            client, run_event(state, run, "train", inputs=[dataset("s3://x", "d")])
        )
        assert sent.status_code == 201, sent.text
    registered = await admin.post(
        "/models/m/versions", content=registration("1", training_run=run), headers=JSON
    )
    assert registered.status_code == 201, registered.text
    used = event(modelname="m", modelversion="1")
    decision = event(causationid=used["id"])
    for sent_event in (used, decision):
        answer = await client.post("/events", content=dumps(sent_event), headers=STRUCTURED)
        assert answer.status_code == 201, answer.text
    spans.clear()
    query = 'query {{ audit(decisionId: "{}", maxDepth: 1) {{ truncated }} }}'.format(
        decision["id"]
    )
    answer = await client.post("/graphql", json={"query": query})
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"]["audit"]["truncated"] is True
    [walk] = [s for s in spans.get_finished_spans() if s.name == "audit walk"]
    assert walk.attributes is not None
    assert walk.attributes["causeway.walk.truncated"] is True
