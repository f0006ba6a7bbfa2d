"""The relay's ``send {stream}`` span (app/telemetry/batch_spans.py, app/projections/relay)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from app.projections.relay.log import Relayed
from app.projections.relay.relay import NatsRelay, RelayConfig


class _GoneJetStream:
    async def publish_async(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("nats went away")


@pytest.mark.parametrize("failure", ["subject too long", "publish refused"])
async def test_a_batch_that_fails_to_publish_still_ends_its_send_span(
    spans: InMemorySpanExporter, failure: str
) -> None:
    """When an event stops the relay (a subject past the control line, a message past
    max_payload, NATS gone), its batch's span ends as an error. It was ended only once
    the whole batch went out: the failing batch, the one an operator looks for, was
    missing from the trace."""
    relay = object.__new__(NatsRelay)
    relay.config = RelayConfig(servers=["nats://127.0.0.1:1"])
    type_ = "t" * 5000 if failure == "subject too long" else "t"
    document = b'{"specversion":"1.0","id":"a","source":"/s","type":"t"}'
    found: asyncio.Queue[Any] = asyncio.Queue()
    await found.put((1, [Relayed(1, "acme", type_, document)]))
    with pytest.raises(Exception):  # noqa: B017, PT011 - whatever stops the relay
        await relay._publish(_GoneJetStream(), {}, found, asyncio.Queue(), 1 << 20)  # type: ignore[arg-type]
    [sent] = [s for s in spans.get_finished_spans() if s.name == "send CAUSEWAY"]
    assert sent.status.status_code == StatusCode.ERROR
