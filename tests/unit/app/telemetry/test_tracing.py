"""Which ``OTEL_*`` variables turn tracing on, and which ``traceparent`` values it continues."""

from __future__ import annotations

import pytest

from app.telemetry import tracing

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "causeway"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_tracing_is_on_only_when_an_exporter_is_named(environ: dict[str, str], on: bool) -> None:
    assert tracing.wanted(environ) is on


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        (PARENT, True),
        (PARENT.upper(), False),  # W3C trace context is lower-case hex
        ("00-x", False),
        (f"00-{'0' * 32}-00f067aa0ba902b7-01", False),
        (f"00-4bf92f3577b34da6a3ce929d0e0e4736-{'0' * 16}-01", False),
        (42, False),
    ],
)
def test_only_a_w3c_traceparent_is_continued(value: object, valid: bool) -> None:
    assert tracing.valid_traceparent(value) is valid
    assert (tracing.span_context_of(value) is not None) is valid
