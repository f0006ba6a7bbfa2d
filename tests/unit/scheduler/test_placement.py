"""Placement rules: requirements against a worker's profile, guaranteed work off spot
workers, and low-priority work kept for spot workers off-peak."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler.placement import OffPeak, WorkerProfile, satisfies

NOON = datetime(2026, 11, 30, 12, tzinfo=UTC)
NIGHT = datetime(2026, 11, 30, 23, tzinfo=UTC)


def profile(spot: bool = False, **capabilities: bool | float) -> WorkerProfile:
    return WorkerProfile.parse("w", capabilities, spot=spot, labels={"zone": "a"})


def fits(
    p: WorkerProfile,
    priority: int = 5,
    off_peak: OffPeak | None = None,
    now: datetime = NOON,
    **needs: float,
) -> bool:
    return satisfies(
        priority=priority, numbers=needs, flags=[], labels={}, profile=p, off_peak=off_peak, now=now
    )


class TestRequirements:
    def test_numbers_are_minimums(self) -> None:
        assert fits(profile(gpu_memory_gb=16), gpu_memory_gb=16)
        assert not fits(profile(gpu_memory_gb=8), gpu_memory_gb=16)
        assert not fits(profile(), gpu_memory_gb=1)

    def test_flags_and_labels(self) -> None:
        p = profile(fp16=True, int8=False)
        base = {"priority": 5, "numbers": {}, "profile": p, "off_peak": None, "now": NOON}
        assert satisfies(flags=["fp16"], labels={"zone": "a"}, **base)  # type: ignore[arg-type]
        assert not satisfies(flags=["int8"], labels={}, **base)  # type: ignore[arg-type]
        assert not satisfies(flags=[], labels={"zone": "b"}, **base)  # type: ignore[arg-type]


class TestPriorityClasses:
    def test_guaranteed_work_is_never_offered_to_spot_workers(self) -> None:
        assert fits(profile(spot=True), priority=7)
        assert not fits(profile(spot=True), priority=8)
        assert fits(profile(spot=False), priority=9)

    def test_off_peak_low_priority_work_goes_to_spot_workers_only(self) -> None:
        hours = OffPeak.parse("22-6", max_priority=3)
        assert fits(profile(), priority=2, off_peak=hours, now=NOON)
        assert not fits(profile(), priority=2, off_peak=hours, now=NIGHT)
        assert fits(profile(spot=True), priority=2, off_peak=hours, now=NIGHT)
        assert fits(profile(), priority=4, off_peak=hours, now=NIGHT)

    @pytest.mark.parametrize(
        ("hours", "hour", "active"),
        [
            ("22-6", 23, True),
            ("22-6", 5, True),
            ("22-6", 6, False),
            ("1-3", 2, True),
            ("1-3", 3, False),
        ],
    )
    def test_hours_wrap_past_midnight(self, hours: str, hour: int, active: bool) -> None:
        window = OffPeak.parse(hours, 3)
        assert window is not None
        assert window.is_active(NOON.replace(hour=hour)) is active
