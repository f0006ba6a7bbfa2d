"""The worker library's rules that need no service: what it sends for a failure."""

from __future__ import annotations

from typing import get_args

from ingest.client import Lease
from ingest.worker import (
    _ERROR_CLASSES,
    TaskFailed,
    _failure,
    _lease_length,
    _storable,
    doubling_pause,
)
from scheduler.tasks import ErrorClass


def test_it_knows_the_error_classes_the_scheduler_takes() -> None:
    # The worker imports nothing of the service: its copy is checked here.
    assert set(_ERROR_CLASSES) == set(get_args(ErrorClass))


def test_a_message_is_sent_as_the_service_can_store_it() -> None:
    assert _storable("a\x00b\udcff") == "a\\u0000b\\udcff"
    assert _storable("\x00" * 3000) == ("\\u0000" * 3000)[:4000]
    assert _storable("plain: é ✓") == "plain: é ✓"


def test_a_class_the_service_does_not_take_fails_the_task_as_unknown() -> None:
    assert _failure(TaskFailed("bogus", "no")) == ("unknown", "TaskFailed('bogus'): no")
    assert _failure(TaskFailed("transient", "later")) == ("transient", "later")


def test_a_lease_lasts_as_the_service_granted_it_whatever_this_machine_s_clock() -> None:
    """Measured by this machine's clock, a lease of 30 s granted by a service
    whose clock runs far ahead (or this one far behind) seemed to last for years, and was
    heartbeated too late: it ran out, and the task's attempt was lost."""
    task = {"id": "t", "leased_at": "2999-01-01T00:00:00+00:00"}
    lease = Lease("t", "l", "2999-01-01T00:00:30+00:00", task, {})
    assert _lease_length(lease) == 30.0
    # A service that does not say when it granted the lease: until it ends, from now.
    older = Lease("t", "l", "2000-01-01T00:00:30+00:00", {"id": "t"}, {})
    assert _lease_length(older) == 1.0  # ended already: heartbeat at once


def test_the_pause_of_a_long_outage_stays_at_its_cap() -> None:
    """From the 1,024th try (about 6 h of outage at 30 s a try) 2**attempt was past a float:
    the run ended with an OverflowError instead of waiting on."""
    assert 0.05 <= doubling_pause(1, 30.0) <= 0.2
    assert all(15.0 <= doubling_pause(attempt, 30.0) <= 30.0 for attempt in (20, 1024, 10**6))
