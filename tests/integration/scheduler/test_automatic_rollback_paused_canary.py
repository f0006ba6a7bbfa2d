"""A model mismatch during a canary that an operator paused (traffic shifted to 0 %)
after the task was leased: the canary took part of the traffic while the task ran, so
it may be what ran it. docs/scheduler.md: a mismatch during a canary rolls back the
candidate, whichever version ran the task; only a canary that served nothing (0 %) is
left, because "the stable version ran the task"."""

from __future__ import annotations

from fastapi import FastAPI

from tests.integration.conftest import catch_up
from tests.integration.events import JSON, dumps
from tests.integration.scheduler.conftest import Client, events_of_type, fail, lease, post
from tests.integration.scheduler.test_automatic_rollback import gate


async def test_a_canary_paused_after_the_lease_is_rolled_back_by_a_mismatch(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    await gate(
        admin,
        ("rollouts", {"model": "faces", "version": "1"}),
        ("promote", {}),
        ("rollouts", {"model": "faces", "version": "2", "percent": 50}),
    )
    await post(admin, type="frame")
    await catch_up(app)
    leased = await lease(worker, "q")  # half the requests go to the canary, 2
    assert leased is not None
    body = {"percent": 0, "reason": "errors on 2", "version": "2"}
    paused = await admin.post("/deployments/gate/traffic", content=dumps(body), headers=JSON)
    assert paused.status_code == 200, paused.text
    after = await fail(worker, leased, "model_version_mismatch")
    await catch_up(app)
    deployment = (await admin.get("/deployments/gate")).json()
    history = (await admin.get(f"/tasks/{leased['task']['id']}")).json()["history"]
    dead = next(h for h in history if h["type"] == "causeway.task.dead_lettered")
    alerts = await events_of_type(admin, "causeway.alert.raised")
    # Not "its stable version '1' ran the task": half the traffic went to 2 then.
    assert not any("ran the task" in str(a["data"]) for a in alerts), alerts
    assert dead["data"]["disposition"] == "rolled_back", dead
    assert (after["state"], deployment["traffic"]) == ("ready", {"1": 100}), deployment


async def test_a_canary_at_zero_since_before_the_lease_is_still_left_to_the_operator(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    """Paused at 0 %, resumed at 30 % and paused again, all before the lease: the canary
    served nothing while the task ran, and the refusal stands."""
    await gate(
        admin,
        ("rollouts", {"model": "faces", "version": "1"}),
        ("promote", {}),
        ("rollouts", {"model": "faces", "version": "2", "percent": 0}),
        ("traffic", {"percent": 30}),
        ("traffic", {"percent": 0}),
    )
    await post(admin, type="frame")
    await catch_up(app)
    leased = await lease(worker, "q")
    assert leased is not None
    await fail(worker, leased, "model_version_mismatch")
    await catch_up(app)
    deployment = (await admin.get("/deployments/gate")).json()
    history = (await admin.get(f"/tasks/{leased['task']['id']}")).json()["history"]
    dead = next(h for h in history if h["type"] == "causeway.task.dead_lettered")
    assert (deployment["candidate_version"], dead["data"]["disposition"]) == (
        "2",
        "rollback_failed",
    )
