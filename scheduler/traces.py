"""Traces of the scheduler's completions (``docs/observability.md``, Traces).

Results appended by ``complete`` continue the trace of the task's trigger: each result
that names no ``traceparent`` of its own is stored with the trigger's
(``decisions.caused_by_trigger``), read with the tasks' rows (``rows.tasks``), with
tracing on or off (what is stored must not depend on it: a retried completion is compared
with the first). While tracing is on, each completion gets a ``complete task`` span, a
child of the trigger's stored context, linked to the worker's request span."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from opentelemetry.trace import Link, Span, SpanKind

from app.telemetry import tracing
from app.telemetry.tracing import TraceContext
from scheduler import tasks as t


def completion_spans(
    tenant: str, states: Sequence[t.TaskState], traces: Mapping[str, TraceContext]
) -> list[Span]:
    """A started ``complete task`` span for each task of ``states`` (none while tracing is
    off); ``end_all`` ends them."""
    if not tracing.on:
        return []
    request = tracing.current_span_context()
    links = [Link(request, {"causeway.link": "request"})] if request.is_valid else []
    spans = []
    for state in states:
        parent = tracing.context_of(*traces.get(state.trigger_id, (None, None)))
        attributes: dict[str, str | int] = {
            "causeway.tenant": tenant,
            "causeway.task.id": state.id,
            "causeway.task.route": state.route_id,
            "causeway.task.trigger": state.trigger_id,
            "causeway.task.attempt": state.attempts,
        }
        spans.append(
            tracing.tracer().start_span(
                "complete task",
                context=parent,
                kind=SpanKind.INTERNAL,
                attributes=attributes,
                links=links,
            )
        )
    return spans


def end_all(spans: Sequence[Span]) -> None:
    for span in spans:
        span.end()


@contextmanager
def decision_span(name: str, tenant: str, **attributes: str | int) -> Iterator[Span | None]:
    """A span around one lease or fail decision while tracing is on (None when off:
    nothing is built)."""
    if not tracing.on:
        yield None
        return
    named = {"causeway.tenant": tenant, **{f"causeway.{k}": v for k, v in attributes.items()}}
    with tracing.tracer().start_as_current_span(name, attributes=named) as span:
        yield span
