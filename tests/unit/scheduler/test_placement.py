"""Worker profiles and off-peak hours: the inputs of the lease's placement rules (the rules
themselves run in the lease's SQL; tests/integration/scheduler holds them to account)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from app.errors import BadRequest
from app.settings import Settings
from scheduler.placement import OffPeak, WorkerProfile

NOON = datetime(2026, 11, 30, 12, tzinfo=UTC)


class TestWorkerProfile:
    def test_numbers_are_capacities_and_true_booleans_are_flags(self) -> None:
        profile = WorkerProfile.parse(
            "w", {"gpu_memory_gb": 24, "fp16": True, "int8": False}, spot=True, labels={}
        )
        assert profile.numbers == {"gpu_memory_gb": 24.0}
        assert profile.flags == {"fp16"}
        assert profile.spot is True

    def test_a_capability_that_is_neither_is_refused(self) -> None:
        with pytest.raises(BadRequest, match=r"capabilities\.gpu"):
            WorkerProfile.parse("w", {"gpu": "lots"}, spot=False, labels={})


class TestOffPeak:
    def test_no_hours_means_no_off_peak(self) -> None:
        assert OffPeak.parse(None, 3) is None
        assert OffPeak.parse("", 3) is None

    @pytest.mark.parametrize(
        ("hours", "hour", "active"),
        [("22-6", 23, True), ("22-6", 5, True), ("22-6", 6, False), ("22-6", 12, False),
         ("1-3", 2, True), ("1-3", 3, False), ("0-24", 12, True)],
    )  # fmt: skip
    def test_hours_wrap_past_midnight(self, hours: str, hour: int, active: bool) -> None:
        window = OffPeak.parse(hours, 3)
        assert window is not None
        assert window.is_active(NOON.replace(hour=hour)) is active

    def test_malformed_hours_say_what_they_should_be(self) -> None:
        with pytest.raises(ValueError, match="START-END"):
            OffPeak.parse("late", 3)


@pytest.mark.parametrize("priority", [8, 9])
def test_guaranteed_priorities_cannot_be_held_for_spot_workers(priority: int) -> None:
    # Spot workers never get 8-9, so holding them back off-peak would leave them to nobody.
    with pytest.raises(ValidationError, match="less than or equal to 7"):
        Settings(_env_file=None, scheduler_off_peak_max_priority=priority)


def test_the_least_workers_cannot_pass_the_most() -> None:
    with pytest.raises(
        ValidationError, match=r"MIN_WORKERS \(10\) is above the most workers \(4\)"
    ):
        Settings(_env_file=None, scheduler_min_workers=10, scheduler_max_workers=4)


@pytest.mark.parametrize("seconds", [1, 3599.5])
def test_a_task_retention_is_none_or_an_hour_at_least(seconds: float) -> None:
    # The queue's signals read recently finished tasks' rows.
    with pytest.raises(ValidationError, match=r"0 \(keep rows for ever\) or at least 3600"):
        Settings(_env_file=None, scheduler_task_retention_s=seconds)
    assert Settings(_env_file=None, scheduler_task_retention_s=0).scheduler_task_retention_s == 0
