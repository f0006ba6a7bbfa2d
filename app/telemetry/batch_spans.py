"""The spans of background batches: a projection's batch (``app.projections.runner``) and
the relay's publish of a batch to NATS JetStream (``app.projections.relay``). Callers test
``tracing.on`` first; each is a root span (no request started it)."""

from __future__ import annotations

from collections.abc import Awaitable

from opentelemetry.trace import Span, SpanKind

from app.telemetry import tracing


async def traced_batch(projection: str, batch: Awaitable[tuple[int, bool]]) -> tuple[int, bool]:
    """Await one projection batch inside a ``projection batch`` span; the positions its
    checkpoint moved and whether another batch follows at once go on the span."""
    with tracing.tracer().start_as_current_span(
        "projection batch", attributes={"causeway.projection": projection}
    ) as span:
        moved, more = await batch
        span.set_attribute("causeway.projection.moved", moved)
        span.set_attribute("causeway.projection.more", more)
        return moved, more


def publish_span(stream: str, messages: int) -> Span:
    """A started ``send {stream}`` span for one batch the relay publishes (the caller ends
    it once the batch is sent; its acks are awaited after)."""
    return tracing.tracer().start_span(
        f"send {stream}",
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "nats",
            "messaging.operation.type": "send",
            "messaging.operation.name": "publish",
            "messaging.destination.name": stream,
            "messaging.batch.message_count": messages,
        },
    )
