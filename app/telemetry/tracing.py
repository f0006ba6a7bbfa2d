"""Traces (OpenTelemetry), configured only by the standard ``OTEL_*`` variables.

Tracing is on in a process when ``configure()`` finds an exporter named:
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, or
``OTEL_TRACES_EXPORTER`` names ``otlp`` (or ``otlp_proto_http``); it is off otherwise, and
always when ``OTEL_SDK_DISABLED=true``. ``OTEL_TRACES_EXPORTER`` is read here because a
hand-built ``TracerProvider`` ignores it (only the SDK's configurator reads it).

On, the process gets a ``TracerProvider`` with ``Resource.create()`` (``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``), its sampler from ``OTEL_TRACES_SAMPLER[_ARG]``, and a
``BatchSpanProcessor`` (``OTEL_BSP_*``) feeding the OTLP HTTP/protobuf exporter, which reads
its own ``OTEL_EXPORTER_OTLP_*`` variables (endpoint, headers, timeout, ...).

Off costs one attribute read: every hot path tests ``tracing.on`` before it builds a span or
its attributes, so nothing of OpenTelemetry runs (the API's no-op span alone costs ~5 us).

``configure()`` runs in each worker process (the app's lifespan), never before a fork: the
batch processor's thread does not survive one. Tests call ``install_for_tests(exporter)``
once per session (the global provider can be set only once per process).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = [
    "SpanKind",
    "TraceContext",
    "configure",
    "context_of",
    "current_span_context",
    "current_traceparent",
    "end_failed",
    "install_for_tests",
    "link_to",
    "on",
    "span_context_of",
    "tracer",
    "turn_off",
    "turn_on",
    "valid_traceparent",
    "wanted",
]

TraceContext = tuple[object, object]  # (traceparent, tracestate) as stored; either may be None

# The one flag the hot paths read. A module global, so ``tracing.on`` costs an attribute read.
on = False
_tracer: Tracer = trace.NoOpTracer()
_propagator = TraceContextTextMapPropagator()
_EXPORTERS = frozenset({"otlp", "otlp_proto_http"})
# W3C trace context, version 00, lower-case hex (what OpenTelemetry's own parser accepts).
_TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


def wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the ``OTEL_*`` variables in ``environ`` (the process's) ask for traces."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() != "none"
    names = {n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")}
    return bool(names & _EXPORTERS)


def configure() -> bool:
    """Turn tracing on in this process when the ``OTEL_*`` variables ask for it; returns
    whether it is on. Once per process: a second call leaves the first's provider."""
    global on, _tracer
    if on or not wanted():
        return on
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _tracer = provider.get_tracer("causeway")
    on = True
    return on


def install_for_tests(exporter: Any) -> None:
    """Turn tracing on with every span sent to ``exporter`` as it ends (an
    ``InMemorySpanExporter``, say). Call it once per test session; ``exporter.clear()``
    between tests."""
    global on, _tracer
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _tracer = provider.get_tracer("causeway")
    on = True


def turn_off() -> None:
    """Stop making spans (the benchmark compares both in one run)."""
    global on
    on = False


def turn_on() -> None:
    """Make spans again, with the provider installed before (for the benchmark)."""
    global on
    on = True


def tracer() -> Tracer:
    """Causeway's tracer (a no-op one until tracing is on)."""
    return _tracer


def valid_traceparent(value: object) -> bool:
    """Whether ``value`` is a W3C ``traceparent`` that tracing can continue."""
    return (
        isinstance(value, str)
        and _TRACEPARENT.match(value) is not None
        and not (value[3:35] == "0" * 32 or value[36:52] == "0" * 16)
    )


def context_of(traceparent: object, tracestate: object = None) -> Context | None:
    """The remote parent named by a stored or sent ``traceparent`` (and ``tracestate``),
    or None when it is missing or malformed."""
    if not valid_traceparent(traceparent):
        return None
    carrier = {"traceparent": traceparent}
    if isinstance(tracestate, str):
        carrier["tracestate"] = tracestate
    return _propagator.extract(carrier)


def span_context_of(traceparent: object, tracestate: object = None) -> SpanContext | None:
    """The span context a ``traceparent`` names, or None."""
    context = context_of(traceparent, tracestate)
    if context is None:
        return None
    found = trace.get_current_span(context).get_span_context()
    return found if found.is_valid else None


def link_to(
    contexts: Iterable[TraceContext], attributes: Mapping[str, str] | None = None
) -> list[Link]:
    """Span links to each valid ``(traceparent, tracestate)`` in ``contexts``."""
    links = []
    for traceparent, tracestate in contexts:
        found = span_context_of(traceparent, tracestate)
        if found is not None:
            links.append(Link(found, dict(attributes or {})))
    return links


def current_traceparent() -> str | None:
    """The ``traceparent`` of the span now current, to store with what it appends."""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent")


def current_span_context() -> SpanContext:
    """The context of the span now current (invalid when there is none)."""
    return trace.get_current_span().get_span_context()


def end_failed(span: Span, failure: BaseException) -> None:
    """End ``span`` as failed by ``failure`` (a cancellation too): the exception recorded,
    an error status and ``error.type``."""
    span.record_exception(failure)
    span.set_status(StatusCode.ERROR, type(failure).__name__)
    span.set_attribute("error.type", type(failure).__name__)
    span.end()
