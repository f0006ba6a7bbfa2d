"""A scheduler result continues its trigger's trace (docs/observability.md, Traces)."""

from __future__ import annotations

from fastapi import FastAPI
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.integration.conftest import catch_up
from tests.integration.events import JSON, dumps, event
from tests.integration.scheduler.conftest import Client, define, lease, post

TRACE = "5cf92f3577b34da6a3ce929d0e0e4736"
TRIGGER = f"00-{TRACE}-10f067aa0ba902b7-01"


async def test_a_result_continues_its_triggers_trace_and_carries_its_traceparent(
    app: FastAPI, admin: Client, worker: Client, spans: InMemorySpanExporter
) -> None:
    await define(admin, id="scan", types=["scan"], kind="detect", queue="q")
    await post(admin, type="scan", traceparent=TRIGGER)
    await catch_up(app)
    leased = await lease(worker, "q")
    assert leased is not None
    result = event(type="finding")
    done = await worker.post(
        f"/tasks/{leased['task']['id']}/complete",
        content=dumps({"lease": leased["lease"], "events": [result]}),
        headers=JSON,
    )
    assert done.status_code == 200, done.text
    [completed] = [s for s in spans.get_finished_spans() if s.name == "complete task"]
    assert completed.context is not None
    assert completed.parent is not None
    assert f"{completed.context.trace_id:032x}" == TRACE
    assert f"{completed.parent.span_id:016x}" == "10f067aa0ba902b7"
    assert completed.attributes is not None
    assert completed.attributes["causeway.task.id"] == leased["task"]["id"]
    [server] = [s for s in spans.get_finished_spans() if s.name.endswith("/complete")]
    assert server.context is not None
    assert [link.context.span_id for link in completed.links] == [server.context.span_id]
    stored = (await admin.get(f"/events/{result['id']}")).json()
    assert stored["traceparent"] == TRIGGER  # the starting trace, carried across the hop
