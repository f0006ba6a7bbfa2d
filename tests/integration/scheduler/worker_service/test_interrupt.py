"""Ctrl-C (``KeyboardInterrupt``) while a worker is in the middle of a batch: the results
of the tasks done are sent, and the tasks not finished are handed back as failed
(transient). The interrupt left the batch at once: the results were dropped (the work
redone by the next attempt), and the tasks not started stayed leased to no one until
their leases ran out (dead-lettered as expired, never having run, at ``max_retries``
0)."""

from __future__ import annotations

from typing import Any

import pytest

from ingest.client import Lease
from ingest.worker import Worker
from tests.integration.events import event
from tests.integration.scheduler.worker_service.conftest import (
    queue_jobs,
    queue_state,
    replayed,
    task,
)


def test_ctrl_c_mid_batch_still_sends_the_results_of_the_tasks_done(
    service: tuple[str, str],
) -> None:
    base, key = service
    queue_jobs(base, key, "interrupted", 3, max_retries=1)
    task_of: dict[int, str] = {}
    ran: list[int] = []

    def handler(lease: Lease) -> list[dict[str, Any]]:
        n = lease.trigger["data"]["n"]
        task_of[n] = lease.task_id
        ran.append(n)
        if len(ran) == 2:
            raise KeyboardInterrupt  # the user presses Ctrl-C during the second task
        return [event(type="job.interrupted.done", data={"n": n})]

    worker = Worker(base, key, queue="interrupted", name="w1", handler=handler, batch=3,
                    wait_s=0.5, lease_s=120.0)  # fmt: skip
    with worker, pytest.raises(KeyboardInterrupt):
        worker.run()
    first = ran[0]
    done = [e["data"]["n"] for e in replayed(base, key, "job.interrupted.done")]
    state = queue_state(base, key, "interrupted")
    assert done == [first], (
        f"task {first} was done before Ctrl-C but its result was never sent"
        f" (task state {task(base, key, task_of[first])['state']!r}, in flight"
        f" {state['in_flight']})"
    )
