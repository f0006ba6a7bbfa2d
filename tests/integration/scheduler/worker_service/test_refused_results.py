"""A handler's results that the service refuses for their own task (a result naming a
cause the store does not hold; an object that is no CloudEvent) fail that task as
``unknown``, with the service's reason, as a handler's bad answer does. The worker
counted them as ``lost`` and dropped the task: leased to no one until its lease ran out,
it died at last as an "expired lease", the reason recorded nowhere."""

from __future__ import annotations

import time
from typing import Any

from ingest.client import Lease
from ingest.worker import Worker
from tests.integration.events import event
from tests.integration.scheduler.worker_service.conftest import (
    queue_jobs,
    queue_state,
    replayed,
    task,
)


def test_a_result_the_service_refuses_fails_its_task_with_the_reason(
    service: tuple[str, str],
) -> None:
    base, key = service
    queue_jobs(base, key, "refused", 2, max_retries=0)
    task_of: dict[int, str] = {}

    def handler(lease: Lease) -> list[dict[str, Any]]:
        n = lease.trigger["data"]["n"]
        task_of[n] = lease.task_id
        if n == 0:  # names a cause the store does not hold
            return [event(type="job.done", causationid="no-such-event")]
        return [event(type="job.done")]

    with Worker(base, key, queue="refused", name="w1", handler=handler, batch=2, wait_s=0.5,
                lease_s=3.0) as worker:  # fmt: skip
        stats = worker.run(until_idle=True)
    assert stats.completed == 1, stats
    left_leased = queue_state(base, key, "refused")["in_flight"]
    deadline = time.monotonic() + 30
    while (refused := task(base, key, task_of[0]))["state"] == "leased":
        assert time.monotonic() < deadline, refused
        time.sleep(0.2)
    assert refused["state"] == "dead", refused
    assert "no-such-event" in refused["error"]["message"], (
        f"the task was left leased ({left_leased} in flight after run()), then died as"
        f" {refused['error']!r}; worker stats {stats}"
    )


def test_a_result_that_is_no_cloudevent_fails_its_task(service: tuple[str, str]) -> None:
    base, key = service
    queue_jobs(base, key, "nocloud", 1, max_retries=0)

    def handler(lease: Lease) -> list[dict[str, Any]]:
        return [{"id": "x", "type": "job.done"}]  # no specversion, no source

    with Worker(base, key, queue="nocloud", name="w1", handler=handler, batch=1, wait_s=0.5,
                lease_s=120.0) as worker:  # fmt: skip
        stats = worker.run(until_idle=True)
    state = queue_state(base, key, "nocloud")
    assert (state["in_flight"], state["dead_letters"]) == (0, 1), (
        f"a result with no specversion nor source: the task is left leased"
        f" (in flight {state['in_flight']}, dead letters {state['dead_letters']}); {stats}"
    )


def _nested(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def test_results_too_deep_for_the_request_fail_their_task_not_the_run(
    service: tuple[str, str],
) -> None:
    """Results ``orjson`` writes on their own but not inside the request that carries them
    (three levels more): the module docstring says results that cannot be sent as JSON
    fail their task as ``unknown``; run() ended with a JSONEncodeError instead, and the
    batch's other task, done, was never completed."""
    base, key = service
    queue_jobs(base, key, "deep", 2, max_retries=0)

    def handler(lease: Lease) -> list[dict[str, Any]]:
        n = lease.trigger["data"]["n"]
        if n == 0:  # [event{data: 251 levels}] is 253 levels: orjson writes it alone
            return [event(type="job.deep.done", data=_nested(251))]
        return [event(type="job.deep.done", data={"n": n})]

    with Worker(base, key, queue="deep", name="w1", handler=handler, batch=2, wait_s=0.5,
                lease_s=60.0) as worker:  # fmt: skip
        try:
            stats = worker.run(until_idle=True)
        except Exception as exc:
            raise AssertionError(
                f"run() raised {type(exc).__name__}: {exc}; the batch's other task, done,"
                f" was never completed"
            ) from exc
    assert (stats.completed, stats.failed) == (1, 1), stats
    assert [e["data"] for e in replayed(base, key, "job.deep.done")] == [{"n": 1}]
