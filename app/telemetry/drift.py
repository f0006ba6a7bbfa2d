"""Clock drift metrics: how far each producer's clock is from the store's.

Drift is ``recorded_at - time`` in seconds: positive when the event was recorded after
the time its producer stamped on it (transport delay, or a clock behind the server's),
negative when it arrived stamped in the future (a clock ahead of the server's). The
drift projection (``app/projections/drift.py``) reports every stored event with a time
here, in the process that leads it; ``docs/observability.md`` ("Clock drift") says why.

Each series is a tenant's source (two tenants may name their sources alike; their
clocks are not the same clocks). The labels are bounded: the first ``max_sources``
(tenant, source) pairs this process reports get labels of their own, the rest share
``tenant="other", source="other"`` (a producer may mint sources freely, and every label
value is a series Prometheus keeps).
"""

from __future__ import annotations

import math
from typing import Any

from prometheus_client import Gauge, Histogram

OTHER = "other"

# Signed buckets, the same boundaries on both sides of zero: a clock ahead gives negative
# drift and lands in the negative buckets. Within ±10 ms is "in step"; a second either
# way is where an alert threshold usually sits; ±1 h catches a wrong time zone. The
# boundaries are the upper bounds (``le``), as always; +Inf is appended by the library.
_MAGNITUDES = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)
DRIFT_BUCKETS: tuple[float, ...] = (
    *(-m for m in reversed(_MAGNITUDES)),
    0.0,
    *_MAGNITUDES,
)

EVENT_TIME_DRIFT = Histogram(
    "causeway_event_time_drift_seconds",
    "recorded_at - time of each stored event, in seconds (negative: stamped in the future).",
    ["tenant", "source"],
    buckets=DRIFT_BUCKETS,
)
# Only the projection's leader sets it, and leadership may move between processes: the
# most recent value of a live process is the one that holds (a dead leader's goes away).
SOURCE_DRIFT_MEDIAN = Gauge(
    "causeway_source_drift_median_seconds",
    "Median drift of the source's events recorded in the last minute, in seconds.",
    ["tenant", "source"],
    multiprocess_mode="livemostrecent",
)


Key = tuple[str, str]  # (tenant, source)
_OTHERS: Key = (OTHER, OTHER)


class DriftMeter:
    """Reports drift by tenant and source, at most ``max_sources`` pairs by name."""

    def __init__(self, max_sources: int) -> None:
        self._max_sources = max_sources
        self._named: set[Key] = set()
        # Each label's series, looked up once: ``labels()`` takes a lock and builds a key
        # on every call, and the projection reports every stored event.
        self._series: dict[Key, tuple[Any, Any]] = {}

    def group(self, tenant: str, source: str) -> Key:
        """The labels ``(tenant, source)`` is reported under: its own or ``other``'s."""
        key = (tenant, source)
        if key in self._named:
            return key
        if len(self._named) < self._max_sources and source != OTHER:
            self._named.add(key)
            return key
        return _OTHERS

    def observe(self, tenant: str, source: str, drift_s: float, median_s: float | None) -> None:
        """One event's drift, and the source's median drift when it changed (None: as it
        was). A source reported as ``other`` has no median gauge: one series cannot hold
        many sources' medians."""
        series = self._series.get((tenant, source))
        if series is None:
            labels = self.group(tenant, source)
            median = SOURCE_DRIFT_MEDIAN.labels(*labels) if labels != _OTHERS else None
            series = (EVENT_TIME_DRIFT.labels(*labels), median)
            if labels != _OTHERS:  # the others are many; ``other``'s lookup is cheap enough
                self._series[tenant, source] = series
        histogram, median = series
        histogram.observe(drift_s)
        if median is not None and median_s is not None:
            median.set(median_s)

    def quiet(self, tenant: str, source: str) -> None:
        """The source has no sample in the last minute: its median gauge says NaN (no
        median; an alert on it is false), not its last one for ever. NaN, not a removed
        series: a process's value stays in the multiprocess files until it dies."""
        series = self._series.get((tenant, source))
        if series is not None and series[1] is not None:
            series[1].set(math.nan)
