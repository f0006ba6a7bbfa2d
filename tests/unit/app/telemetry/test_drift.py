"""The drift metrics' source label stays bounded, whatever sources producers mint."""

from __future__ import annotations

from prometheus_client import REGISTRY

from app.telemetry.drift import DriftMeter


def count(source: str) -> float:
    value = REGISTRY.get_sample_value("causeway_event_time_drift_seconds_count", {"source": source})
    return value or 0.0


def test_sources_past_the_limit_are_reported_as_other() -> None:
    meter = DriftMeter(max_sources=2)
    before = {s: count(s) for s in ("/u/a", "/u/b", "/u/c", "other")}
    for source in ("/u/a", "/u/b", "/u/c", "/u/a"):
        meter.observe(source, -3.0, -3.0)
    assert count("/u/a") - before["/u/a"] == 2
    assert count("/u/b") - before["/u/b"] == 1
    assert count("/u/c") == before["/u/c"] == 0
    assert count("other") - before["other"] == 1


def test_a_clock_ahead_lands_below_zero_in_the_buckets() -> None:
    before = REGISTRY.get_sample_value(
        "causeway_event_time_drift_seconds_bucket", {"source": "/u/ahead", "le": "0.0"}
    )
    DriftMeter(max_sources=10).observe("/u/ahead", -3.0, -3.0)
    after = REGISTRY.get_sample_value(
        "causeway_event_time_drift_seconds_bucket", {"source": "/u/ahead", "le": "0.0"}
    )
    assert (after or 0.0) - (before or 0.0) == 1
