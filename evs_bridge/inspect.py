"""What a recording holds, in one streaming pass: ``summarise(path)`` for ``causeway evs inspect``.

The summary is built chunk by chunk, so a recording of any length is summarised in bounded
memory: counts and time extremes are running values, and the peak rate is the largest event
count in a ``bin_us`` window (windows aligned on the first event's time), of which only the
few windows still open at the end of a chunk are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evs_bridge.decoders import DecodedChunk, open_recording
from evs_bridge.events import ClockDomain

_PEAK_BIN_US = 10_000


@dataclass(frozen=True, slots=True)
class RecordingSummary:
    """A recording's sensor, format, clock and event statistics (rates in events per second)."""

    path: Path
    sensor: str
    width: int
    height: int
    format: str
    clock: ClockDomain
    events: int
    triggers: int
    first_t_us: int | None
    last_t_us: int | None
    duration_s: float
    mean_rate_hz: float
    peak_rate_hz: float
    peak_bin_us: int
    on_events: int
    metadata: dict[str, Any] = field(default_factory=dict)


def summarise(path: Path, *, bin_us: int = _PEAK_BIN_US) -> RecordingSummary:
    """Decode ``path`` once and describe it; the peak rate is measured over ``bin_us`` windows."""
    recording = open_recording(Path(path))
    info = recording.info
    events = triggers = on_events = 0
    first: int | None = None
    last: int | None = None
    origin: int | None = None
    open_bins: dict[int, int] = {}
    peak = 0
    for chunk in recording.chunks():
        if isinstance(chunk, DecodedChunk) and chunk.triggers is not None:
            triggers += len(chunk.triggers)
        times = chunk.events["t"]
        if len(times) == 0:
            continue
        events += len(times)
        on_events += int(np.count_nonzero(chunk.events["p"]))
        low, high = int(times.min()), int(times.max())
        first = low if first is None else min(first, low)
        last = high if last is None else max(last, high)
        if origin is None:
            origin = int(times[0])
        bins, counts = np.unique((times.astype(np.int64) - origin) // bin_us, return_counts=True)
        for index, count in zip(bins.tolist(), counts.tolist(), strict=True):
            open_bins[index] = open_bins.get(index, 0) + count
        # Sensor time may step back a little, never by a whole bin: older bins are final.
        for index in [i for i in open_bins if i < int(bins[-1]) - 1]:
            peak = max(peak, open_bins.pop(index))
    peak = max([peak, *open_bins.values()])
    duration_s = 0.0 if first is None or last is None else (last - first) / 1e6
    return RecordingSummary(
        path=Path(path),
        sensor=info.sensor,
        width=info.width,
        height=info.height,
        format=info.format,
        clock=info.clock,
        events=events,
        triggers=triggers,
        first_t_us=first,
        last_t_us=last,
        duration_s=duration_s,
        mean_rate_hz=events / duration_s if duration_s > 0 else 0.0,
        peak_rate_hz=peak * 1e6 / bin_us,
        peak_bin_us=bin_us,
        on_events=on_events,
        metadata=dict(info.metadata),
    )
