"""Size limits on what ingest accepts, taken from settings by the composition root."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    max_attributes_bytes: int = 1024  # every attribute but data, as compact JSON
    max_event_data_bytes: int = 1 << 20  # data as JSON, or the bytes of binary data
    max_request_bytes: int = 16 << 20  # the whole HTTP body
    max_batch_events: int = 10_000
    max_future_s: float | None = None  # how far ahead of the server's clock a time may be
