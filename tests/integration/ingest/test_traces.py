"""Traces follow causation (docs/observability.md, Traces): with the SDK's in-memory
exporter, a request's spans and their parent, a producer's ``traceparent`` continued, and
a derived event's span linked to its two causes."""

from __future__ import annotations

from typing import Any

import httpx2
from fastapi import FastAPI
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.store.trace_contexts import trace_contexts
from ingest import traced
from tests.integration.conftest import catch_up
from tests.integration.events import BATCH, STRUCTURED, dumps, event

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PRODUCER = f"00-{TRACE}-00f067aa0ba902b7-01"


def named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name == name]


class TestTraces:
    async def test_a_request_has_a_server_span_and_its_events_are_its_children(
        self, client: httpx2.AsyncClient, spans: InMemorySpanExporter, register: Any
    ) -> None:
        await register("tumor-detector", "3")
        spans.clear()
        sent = event(modelname="tumor-detector", modelversion="3")
        answer = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        assert answer.status_code == 201, answer.text
        [server] = named(spans, "POST /events")
        assert server.attributes is not None
        assert server.attributes["http.route"] == "/events"
        assert server.attributes["http.request.method"] == "POST"
        assert server.attributes["http.response.status_code"] == 201
        [ingested] = named(spans, "ingest event")
        assert ingested.parent is not None
        assert server.context is not None
        assert ingested.parent.span_id == server.context.span_id
        assert ingested.attributes is not None
        assert ingested.attributes["cloudevents.event_id"] == sent["id"]
        assert ingested.attributes["gen_ai.response.model"] == "tumor-detector"
        assert ingested.attributes["causeway.model.version"] == "3"
        [group] = named(spans, "append group")
        assert group.attributes is not None
        assert group.attributes["causeway.group.events"] == 1
        assert [link.context.span_id for link in group.links] == [server.context.span_id]

    async def test_a_read_is_named_by_its_route_template(
        self, client: httpx2.AsyncClient, spans: InMemorySpanExporter
    ) -> None:
        await client.get("/events/nothing-here")
        [server] = [s for s in spans.get_finished_spans() if s.name.startswith("GET ")]
        assert server.name == "GET /events/{event_id}"
        assert server.attributes is not None
        assert server.attributes["http.response.status_code"] == 404

    async def test_a_producers_traceparent_is_continued_and_stored(
        self, client: httpx2.AsyncClient, spans: InMemorySpanExporter
    ) -> None:
        sent = event(traceparent=PRODUCER, tracestate="vendor=1")
        answer = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        assert answer.status_code == 201, answer.text
        [ingested] = named(spans, "ingest event")
        assert ingested.context is not None
        assert ingested.parent is not None
        assert f"{ingested.context.trace_id:032x}" == TRACE
        assert f"{ingested.parent.span_id:016x}" == "00f067aa0ba902b7"
        stored = (await client.get(f"/events/{sent['id']}")).json()
        assert stored["traceparent"] == PRODUCER
        assert stored["tracestate"] == "vendor=1"

    async def test_a_binary_mode_ce_traceparent_is_continued(
        self, client: httpx2.AsyncClient, spans: InMemorySpanExporter
    ) -> None:
        headers = {
            "content-type": "application/json",
            "ce-specversion": "1.0",
            "ce-id": "binary-traced",
            "ce-source": "/cameras/gate",
            "ce-type": "frame",
            "ce-traceparent": PRODUCER,
        }
        answer = await client.post("/events", content=b"{}", headers=headers)
        assert answer.status_code == 201, answer.text
        [ingested] = named(spans, "ingest event")
        assert ingested.context is not None
        assert f"{ingested.context.trace_id:032x}" == TRACE

    async def test_a_malformed_traceparent_is_stored_and_ignored_for_tracing(
        self, client: httpx2.AsyncClient, spans: InMemorySpanExporter
    ) -> None:
        sent = event(traceparent=PRODUCER.upper())  # upper-case hex is not W3C trace context
        answer = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        assert answer.status_code == 201, answer.text
        [server] = named(spans, "POST /events")
        [ingested] = named(spans, "ingest event")
        assert ingested.parent is not None
        assert server.context is not None
        assert ingested.parent.span_id == server.context.span_id
        assert (await client.get(f"/events/{sent['id']}")).json()["traceparent"] == sent[
            "traceparent"
        ]

    async def test_a_derived_events_span_links_to_its_two_causes(
        self, client: httpx2.AsyncClient, spans: InMemorySpanExporter
    ) -> None:
        first = event(traceparent=f"00-{'1' * 32}-{'a' * 16}-01")
        second = event(traceparent=f"00-{'2' * 32}-{'b' * 16}-01")
        answer = await client.post("/events", content=dumps([first, second]), headers=BATCH)
        assert answer.status_code == 201, answer.text
        derived = event(causationid=f"{first['id']},{second['id']}")
        answer = await client.post("/events", content=dumps(derived), headers=STRUCTURED)
        assert answer.status_code == 201, answer.text
        [span] = [
            s
            for s in named(spans, "ingest event")
            if s.attributes and s.attributes["cloudevents.event_id"] == derived["id"]
        ]
        linked = {
            (f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") for link in span.links
        }
        assert linked == {("1" * 32, "a" * 16), ("2" * 32, "b" * 16)}
        assert all(
            link.attributes and link.attributes["causeway.link"] == "cause" for link in span.links
        )

    async def test_a_cause_stored_while_its_effect_was_on_its_way_is_linked(
        self, client: httpx2.AsyncClient, spans: InMemorySpanExporter, monkeypatch: Any
    ) -> None:
        """A producer sends a cause and, without waiting, its effect: the effect's span
        read its causes' contexts before its append, found none yet, and had no link,
        though the store took the effect with that cause. Forced here: the cause lands
        between the effect's read of contexts and its append."""
        cause = event(traceparent=f"00-{'3' * 32}-{'c' * 16}-01")
        effect = event(causationid=cause["id"])

        async def cause_lands_meanwhile(*args: Any) -> Any:
            found = await trace_contexts(*args)
            monkeypatch.setattr(traced, "trace_contexts", trace_contexts)  # once
            landed = await client.post("/events", content=dumps(cause), headers=STRUCTURED)
            assert landed.status_code == 201, landed.text
            return found

        monkeypatch.setattr(traced, "trace_contexts", cause_lands_meanwhile)
        answer = await client.post("/events", content=dumps(effect), headers=STRUCTURED)
        assert answer.status_code == 201, answer.text
        [span] = [
            s
            for s in named(spans, "ingest event")
            if s.attributes and s.attributes["cloudevents.event_id"] == effect["id"]
        ]
        assert [(f"{link.context.trace_id:032x}", link.attributes) for link in span.links] == [
            ("3" * 32, {"causeway.link": "cause", "causeway.cause": cause["id"]})
        ]

    async def test_a_lineage_query_has_an_operation_span_and_a_walk_span(
        self, client: httpx2.AsyncClient, spans: InMemorySpanExporter
    ) -> None:
        cause = event()
        await client.post("/events", content=dumps(cause), headers=STRUCTURED)
        effect = event(causationid=cause["id"])
        await client.post("/events", content=dumps(effect), headers=STRUCTURED)
        spans.clear()
        query = 'query Upstream {{ lineage(id: "{}") {{ truncated }} }}'.format(effect["id"])
        answer = await client.post("/graphql", json={"query": query})
        assert answer.status_code == 200, answer.text
        [operation] = named(spans, "query Upstream")
        [walk] = named(spans, "lineage walk")
        assert walk.parent is not None
        assert operation.context is not None
        assert walk.parent.span_id == operation.context.span_id
        assert walk.attributes is not None
        assert walk.attributes["causeway.walk.nodes"] == 2
        assert walk.attributes["causeway.walk.depth"] == 1
        assert walk.attributes["causeway.walk.truncated"] is False
        [server] = named(spans, "POST /graphql")
        assert operation.parent is not None
        assert server.context is not None
        assert operation.parent.span_id == server.context.span_id

    async def test_each_projection_batch_has_a_span(
        self, app: FastAPI, client: httpx2.AsyncClient, spans: InMemorySpanExporter
    ) -> None:
        await client.post("/events", content=dumps(event()), headers=STRUCTURED)
        await catch_up(app)
        batches = named(spans, "projection batch")
        assert {s.attributes["causeway.projection"] for s in batches if s.attributes} == {
            p.name for p in app.state.runner.projections
        }
