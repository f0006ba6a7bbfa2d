"""The spans of ingest (``docs/observability.md``, Traces): one per event appended, while
tracing is on (``Ingest.answer`` tests ``tracing.on`` before it comes here).

An event that carries the CloudEvents Distributed Tracing extension (``traceparent``,
optionally ``tracestate``) gets its span as a child of that producer context; any other
event's span is a child of the request's. An event that names causes gets span links to
the causes' stored trace contexts (``causeway.link=cause``; a cause earlier in the same
batch, by the context it came with; one stored by a request at the same time, once the
append has found it), so a trace viewer walks the lineage across services.
An append that fails, or is cancelled (the server stopping), ends its spans as errors. A malformed ``traceparent`` is stored as sent (it is an
extension attribute like any other) and ignored for tracing."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.trace import Link, Span, SpanKind

from app.db.tenancy import tenant_transaction
from app.store.append.group_commit import Appender
from app.store.records import Appended, NewEvent
from app.store.trace_contexts import trace_contexts
from app.telemetry import tracing


async def traced_append(
    appender: Appender, tenant: str, events: Sequence[NewEvent], size_bytes: int
) -> list[Appended]:
    """``appender.append`` with a span for each event."""
    in_batch: dict[str, tracing.TraceContext] = {
        e.id: (e.extensions.get("traceparent"), e.extensions.get("tracestate"))
        for e in events
        if "traceparent" in e.extensions
    }
    causes = {cause for event in events for cause in event.causes} - in_batch.keys()
    stored: dict[str, tracing.TraceContext] = {}
    if causes:
        async with tenant_transaction(appender.engine, tenant) as connection:
            stored = await trace_contexts(connection, tenant, causes)
    stored.update(in_batch)
    spans = [_start(tenant, event, stored) for event in events]
    try:
        appended = await appender.append(tenant, events, size_bytes=size_bytes)
    except BaseException as exc:  # a cancellation too: its spans end all the same
        for span in spans:
            tracing.end_failed(span, exc)
        raise
    late = causes - stored.keys()
    if late:
        await _link_late(appender, tenant, events, spans, late)
    for span, landed in zip(spans, appended, strict=True):
        span.set_attribute("causeway.position", landed.position)
        span.end()
    return appended


async def _link_late(
    appender: Appender,
    tenant: str,
    events: Sequence[NewEvent],
    spans: list[Span],
    late: set[str],
) -> None:
    """Link the causes whose contexts were not stored when the spans started: a cause
    sent in a request of its own at the same time, which the store took first (every
    cause is stored once the append succeeds)."""
    async with tenant_transaction(appender.engine, tenant) as connection:
        found = await trace_contexts(connection, tenant, late)
    for span, event in zip(spans, events, strict=True):
        for cause in event.causes:
            if cause in found:
                for link in _links(cause, found[cause]):
                    span.add_link(link.context, link.attributes)


def _links(cause: str, context: tracing.TraceContext) -> list[Link]:
    return tracing.link_to([context], {"causeway.link": "cause", "causeway.cause": cause})


def _start(tenant: str, event: NewEvent, stored: dict[str, tracing.TraceContext]) -> Span:
    extensions = event.extensions
    parent = tracing.context_of(extensions.get("traceparent"), extensions.get("tracestate"))
    links = []
    for cause in event.causes:
        if cause in stored:
            links += _links(cause, stored[cause])
    attributes: dict[str, str | int] = {
        "cloudevents.event_id": event.id,
        "cloudevents.event_source": event.source,
        "cloudevents.event_type": event.type,
        "causeway.tenant": tenant,
        "causeway.stream": event.stream,
        "causeway.causes": len(event.causes),
    }
    if event.subject is not None:
        attributes["cloudevents.event_subject"] = event.subject
    if event.model_name is not None:
        attributes["gen_ai.response.model"] = event.model_name
    if event.model_version is not None:
        attributes["causeway.model.version"] = event.model_version
    return tracing.tracer().start_span(
        "ingest event", context=parent, kind=SpanKind.CONSUMER, attributes=attributes, links=links
    )
