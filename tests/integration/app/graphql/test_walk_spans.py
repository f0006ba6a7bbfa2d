"""The ``audit walk`` span's attributes (docs/observability.md, Spans)."""

from __future__ import annotations

import httpx2
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.integration.ingest.openlineage.audits import audit_of_a_decision
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
    query = "query($id: ID!) { audit(decisionId: $id, maxDepth: 1) { truncated } }"
    answer = await audit_of_a_decision(client, admin, run, query)
    assert answer["data"]["audit"]["truncated"] is True, answer
    [walk] = [s for s in spans.get_finished_spans() if s.name == "audit walk"]
    assert walk.attributes is not None
    assert walk.attributes["causeway.walk.truncated"] is True
