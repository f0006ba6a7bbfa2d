"""The spans of GraphQL (``docs/observability.md``, Traces): one per operation, and one
per lineage or audit walk with what it found. Nothing runs while ``tracing.on`` is False
but that test."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

from strawberry.extensions import SchemaExtension

from app.telemetry import tracing

T = TypeVar("T")


class TracedOperation(SchemaExtension):
    """A ``{type} {name}`` span (``query audit``) around each operation, with the
    ``graphql.operation.*`` attributes."""

    def on_execute(self) -> Iterator[None]:
        if not tracing.on:
            yield
            return
        context = self.execution_context
        kind = context.operation_type.value
        name = context.operation_name
        attributes = {"graphql.operation.type": kind}
        if name:
            attributes["graphql.operation.name"] = name
        span_name = f"{kind} {name}" if name else kind
        with tracing.tracer().start_as_current_span(span_name, attributes=attributes):
            yield


async def traced_walk(
    kind: str,
    walking: Awaitable[T],
    max_depth: int,
    found: Callable[[T], tuple[int, int, bool]],
) -> T:
    """Await ``walking`` (a lineage or audit walk) inside a ``{kind} walk`` span;
    ``found`` gives the answer's nodes, depth reached and whether it was truncated."""
    with tracing.tracer().start_as_current_span(
        f"{kind} walk", attributes={"causeway.walk.max_depth": max_depth}
    ) as span:
        answer = await walking
        nodes, depth, truncated = found(answer)
        span.set_attribute("causeway.walk.nodes", nodes)
        span.set_attribute("causeway.walk.depth", depth)
        span.set_attribute("causeway.walk.truncated", truncated)
        return answer
