"""A debounced task that was leased when a newer event with its key came was passed over
(the dispatcher supersedes only a pending task), and once back in the queue (its lease
ran out, or its worker failed it) it ran again, and first, beside the newer event's task:
the stale work ran twice (from a review). Its failure now supersedes it by the newer task."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI

from scheduler import tasks as t
from scheduler.service import SchedulerLoop, SchedulerTimers
from tests.integration.conftest import catch_up
from tests.integration.scheduler.conftest import Client, define, fail, lease, post


def sweeper(app: FastAPI) -> SchedulerLoop:
    state = app.state
    return SchedulerLoop(
        state.engine, state.scheduler_controller, SchedulerTimers(), state.decisions
    )


async def _older_leased_newer_made(
    app: FastAPI, admin: Client, worker: Client, **route: Any
) -> dict[str, Any]:
    await define(admin, id="r", types=["job"], kind="k", queue="q",
                 debounce={"key": "user", "window_s": 60}, **route)  # fmt: skip
    await post(admin, type="job", data={"user": "u", "v": 1})
    await catch_up(app)
    older = await lease(worker, "q", lease_s=0.3)
    assert older is not None
    await post(admin, type="job", data={"user": "u", "v": 2})  # newer, same key, in window
    await catch_up(app)
    return older


async def test_an_older_task_whose_lease_ran_out_is_superseded_not_retried(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    older = await _older_leased_newer_made(app, admin, worker)
    await asyncio.sleep(0.4)
    assert await sweeper(app).expire_leases() == 1
    offered = await lease(worker, "q", worker="w2")
    assert offered is not None
    assert offered["trigger"]["data"]["v"] == 2  # the newer event's task, not v1's again
    assert await lease(worker, "q", worker="w3") is None
    ended = (await admin.get(f"/tasks/{older['task']['id']}")).json()
    assert ended["state"] == "superseded", ended


async def test_an_older_task_failed_after_a_newer_event_is_superseded_by_it(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    older = await _older_leased_newer_made(app, admin, worker, backoff_base_s=0)
    after = await fail(worker, older, "transient")
    assert after["state"] == "superseded", after
    # The report sent again (its answer lost) is answered with the task as it is.
    again = await fail(worker, older, "transient")
    assert again["state"] == "superseded", again


async def test_a_failure_with_no_newer_task_of_its_key_is_retried(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    await define(admin, id="r", types=["job"], kind="k", queue="q",
                 debounce={"key": "user", "window_s": 60}, backoff_base_s=0)  # fmt: skip
    await post(admin, type="job", data={"user": "u", "v": 1})
    await post(admin, type="job", data={"user": "other", "v": 2})  # another key
    await catch_up(app)
    older = await lease(worker, "q", lease_s=30)
    assert older is not None
    assert older["trigger"]["data"]["v"] == 1
    after = await fail(worker, older, "transient")
    assert after["state"] == "ready", after


async def test_a_failure_sent_again_after_the_retried_task_was_superseded_is_still_200(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    """v1 failed (retried, ready again), then the dispatcher superseded it by v2: the
    report sent again is still answered 200 (the last failure is that report). Taking
    every superseded decision for a failure, it was a 409 (a review of this change)."""
    await define(admin, id="r", types=["job"], kind="k", queue="q",
                 debounce={"key": "user", "window_s": 60}, backoff_base_s=30)  # fmt: skip
    await post(admin, type="job", data={"user": "u", "v": 1})
    await catch_up(app)
    older = await lease(worker, "q", lease_s=30)
    assert older is not None
    after = await fail(worker, older, "transient")
    assert after["state"] == "ready", after
    await post(admin, type="job", data={"user": "u", "v": 2})
    await catch_up(app)
    task = (await admin.get(f"/tasks/{older['task']['id']}")).json()
    assert task["state"] == "superseded", task  # the dispatcher superseded the ready v1
    # The same report sent again (its answer was lost).
    response = await worker.post(
        f"/tasks/{older['task']['id']}/fail",
        json={"lease": older["lease"], "class": "transient", "message": "boom"},
    )
    assert response.status_code == 200, response.text


async def test_a_newer_event_with_the_same_time_supersedes_a_failed_attempt_as_a_pending_one(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    """The dispatcher takes an event of a key with the same time as a pending task's for
    the newer (it came later): a leased one failed after such an event is superseded too
    (it was retried beside it: a review of this change)."""
    await define(admin, id="r", types=["job"], kind="k", queue="q",
                 debounce={"key": "user", "window_s": 60}, backoff_base_s=0)  # fmt: skip
    same = "2026-12-07T12:00:00Z"
    await post(admin, type="job", time=same, data={"user": "u", "v": 1})
    await catch_up(app)
    older = await lease(worker, "q", lease_s=30)
    assert older is not None
    assert older["trigger"]["data"] == {"user": "u", "v": 1}
    # Control: a PENDING task is superseded by a later-sent event of its key and the same time.
    x1 = await post(admin, type="job", time=same, data={"user": "x", "v": 1})
    await post(admin, type="job", time=same, data={"user": "x", "v": 2})
    await catch_up(app)
    x1_task = t.task_id_for("acme", "r", x1["id"])
    assert (await admin.get(f"/tasks/{x1_task}")).json()["state"] == "superseded"
    # The leased one: the newer event of its key (same time) comes while it runs ...
    await post(admin, type="job", time=same, data={"user": "u", "v": 2})
    await catch_up(app)
    after = await fail(worker, older, "transient")  # ... and its attempt fails
    assert after["state"] == "superseded", after
