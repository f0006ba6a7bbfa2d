"""A debounced task that was leased when a newer event with its key came was passed over
(the dispatcher supersedes only a pending task), and once back in the queue (its lease
ran out, or its worker failed it) it ran again, and first, beside the newer event's task:
the stale work ran twice (from a review). Its failure now supersedes it by the newer task."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI

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
