"""The HTTP server span (app/web/traced.py): semantic conventions and W3C Trace Context."""

from __future__ import annotations

import httpx2
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PRODUCER = f"00-{TRACE}-00f067aa0ba902b7-01"


def server_span(spans: InMemorySpanExporter) -> ReadableSpan:
    [server] = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]
    return server


async def test_an_unknown_http_method_is_recorded_as_other(
    client: httpx2.AsyncClient, spans: InMemorySpanExporter
) -> None:
    """Semantic conventions (http.request.method): a method the instrumentation does not
    know MUST be recorded as ``_OTHER`` (the original in ``http.request.method_original``),
    and the span named ``HTTP {route}``: no client mints attribute values and span names
    (the request metrics fold such methods into ``other`` too)."""
    await client.request("PURGE", "/events/x")
    server = server_span(spans)
    assert server.attributes is not None
    assert server.attributes["http.request.method"] == "_OTHER"
    assert server.attributes["http.request.method_original"] == "PURGE"
    assert server.name == "HTTP /events/{event_id}"


async def test_several_tracestate_header_fields_are_combined(
    client: httpx2.AsyncClient, spans: InMemorySpanExporter
) -> None:
    """W3C Trace Context: multiple ``tracestate`` header fields MUST be combined into one
    (RFC 7230 field order). Only the last field was kept: vendor entries were lost."""
    headers = httpx2.Headers(
        [("traceparent", PRODUCER), ("tracestate", "a=1"), ("tracestate", "b=2")]
    )
    await client.get("/events/x", headers=headers)
    server = server_span(spans)
    assert server.context is not None
    assert f"{server.context.trace_id:032x}" == TRACE
    assert dict(server.context.trace_state) == {"a": "1", "b": "2"}
