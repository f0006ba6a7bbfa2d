"""The drift metrics: a series per tenant's source, bounded whatever sources producers
mint."""

from __future__ import annotations

from prometheus_client import REGISTRY

from app.telemetry.drift import DriftMeter


def count(tenant: str, source: str) -> float:
    value = REGISTRY.get_sample_value(
        "causeway_event_time_drift_seconds_count", {"tenant": tenant, "source": source}
    )
    return value or 0.0


def test_sources_past_the_limit_are_reported_as_other() -> None:
    meter = DriftMeter(max_sources=2)
    pairs = [("t", "/u/a"), ("t", "/u/b"), ("t", "/u/c"), ("other", "other")]
    before = {pair: count(*pair) for pair in pairs}
    for source in ("/u/a", "/u/b", "/u/c", "/u/a"):
        meter.observe("t", source, -3.0, -3.0)
    assert count("t", "/u/a") - before["t", "/u/a"] == 2
    assert count("t", "/u/b") - before["t", "/u/b"] == 1
    assert count("t", "/u/c") == before["t", "/u/c"] == 0
    assert count("other", "other") - before["other", "other"] == 1


def test_two_tenants_naming_a_source_alike_have_a_series_each() -> None:
    """Their clocks are not the same clocks: one tenant's late producer does not move the
    other's drift, nor its median (which an alert reads)."""
    meter = DriftMeter(max_sources=10)
    before = count("alpha", "/cam/gate"), count("beta", "/cam/gate")
    meter.observe("alpha", "/cam/gate", 0.01, 0.01)
    meter.observe("beta", "/cam/gate", 3600.0, 3600.0)
    assert count("alpha", "/cam/gate") - before[0] == 1
    assert count("beta", "/cam/gate") - before[1] == 1
    median = REGISTRY.get_sample_value(
        "causeway_source_drift_median_seconds", {"tenant": "alpha", "source": "/cam/gate"}
    )
    assert median == 0.01


def test_a_clock_ahead_lands_below_zero_in_the_buckets() -> None:
    labels = {"tenant": "t", "source": "/u/ahead", "le": "0.0"}
    before = REGISTRY.get_sample_value("causeway_event_time_drift_seconds_bucket", labels)
    DriftMeter(max_sources=10).observe("t", "/u/ahead", -3.0, -3.0)
    after = REGISTRY.get_sample_value("causeway_event_time_drift_seconds_bucket", labels)
    assert (after or 0.0) - (before or 0.0) == 1
