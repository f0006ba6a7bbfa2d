"""The span of an append group (``app.store.append.group_commit``): one transaction that
writes the events of many requests. It runs in the writer's own task, so it is a root span
linked to each request's span (``causeway.link=request``)."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from opentelemetry.trace import Link, SpanContext, SpanKind

from app.telemetry import tracing

T = TypeVar("T")


async def traced_group(
    work: Awaitable[T], shape: tuple[int, int, int, float, Sequence[SpanContext]], how: str
) -> T:
    """Await ``work`` (writing one group) inside its span. ``shape``: the group's events,
    tenants, requests, its oldest request's wait in the queue (seconds) and the requests'
    span contexts; ``how``: ``ahead`` (planned on the tail) or ``lock`` (under the lock)."""
    events, tenants, requests, wait, contexts = shape
    attributes: dict[str, Any] = {
        "db.system.name": "postgresql",
        "db.operation.name": "INSERT",
        "db.collection.name": "events",
        "causeway.group.events": events,
        "causeway.group.tenants": tenants,
        "causeway.group.requests": requests,
        "causeway.group.queue_wait_s": wait,
        "causeway.group.planned": how,
    }
    links = [Link(c, {"causeway.link": "request"}) for c in contexts if c.is_valid]
    with tracing.tracer().start_as_current_span(
        "append group", kind=SpanKind.CLIENT, attributes=attributes, links=links
    ):
        return await work
