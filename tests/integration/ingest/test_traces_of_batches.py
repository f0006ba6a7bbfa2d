"""Ingest spans of a batch, and of an append that never ends (docs/observability.md,
"Traces follow causation")."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.store.records import NewEvent
from ingest.traced import traced_append
from tests.integration.events import BATCH, dumps, event


def ingest_span(spans: InMemorySpanExporter, event_id: str) -> ReadableSpan:
    [span] = [
        s
        for s in spans.get_finished_spans()
        if s.name == "ingest event"
        and s.attributes
        and s.attributes["cloudevents.event_id"] == event_id
    ]
    return span


async def test_a_cause_sent_in_the_same_batch_gets_a_span_link(
    client: httpx2.AsyncClient, spans: InMemorySpanExporter
) -> None:
    """A batch may carry an event and the event derived from it (it is appended: 201).
    The derived event names a cause whose stored trace context is the producer's, so its
    span links to it. (The causes' contexts were read from the store before the batch was
    written, and the link was missing.)"""
    cause = event(traceparent=f"00-{'1' * 32}-{'a' * 16}-01")
    derived = event(causationid=cause["id"])
    answer = await client.post("/events", content=dumps([cause, derived]), headers=BATCH)
    assert answer.status_code == 201, answer.text
    stored = (await client.get(f"/events/{cause['id']}")).json()
    assert stored["traceparent"] == cause["traceparent"]
    span = ingest_span(spans, derived["id"])
    linked = {(f"{x.context.trace_id:032x}", f"{x.context.span_id:016x}") for x in span.links}
    assert linked == {("1" * 32, "a" * 16)}


class _CancelledAppender:
    engine = None  # no causes: never read

    async def append(self, tenant: str, events: Any, size_bytes: int = 0) -> Any:
        raise asyncio.CancelledError  # as when the server stops during a group


async def test_a_cancelled_append_still_ends_its_ingest_spans(
    spans: InMemorySpanExporter,
) -> None:
    """A cancelled append (the server stopping) ends its ``ingest event`` spans, as errors;
    they were left open, never exported: a hole in the trace."""
    new = NewEvent(id="cancelled-1", source="/s", type="t", stream="s")
    with pytest.raises(asyncio.CancelledError):
        await traced_append(_CancelledAppender(), "acme", [new], 10)  # type: ignore[arg-type]
    assert [s.name for s in spans.get_finished_spans()] == ["ingest event"]
