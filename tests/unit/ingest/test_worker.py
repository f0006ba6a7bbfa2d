"""The worker library's rules that need no service: what it sends for a failure."""

from __future__ import annotations

from typing import get_args

from ingest.worker import _ERROR_CLASSES, TaskFailed, _failure, _storable
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
