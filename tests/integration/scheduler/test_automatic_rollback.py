"""The rollback a model mismatch brings (docs/scheduler.md, "Dead letters"):
what it rolls back to, and when it is owed."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from fastapi import FastAPI

from app.store.deployment_reads import DeploymentReader
from tests.integration.conftest import catch_up
from tests.integration.events import JSON, dumps, registration
from tests.integration.scheduler.conftest import (
    Client,
    define,
    events_of_type,
    fail,
    lease,
    post,
    queues,
)


async def gate(admin: Client, *steps: tuple[str, dict[str, Any]]) -> None:
    """Versions 1-3 of ``faces`` registered, ``steps`` applied to service ``gate``, and a
    route of ``frame`` events whose model mismatches roll ``gate`` back."""
    for version in ("1", "2", "3"):
        await admin.post("/models/faces/versions", content=registration(version), headers=JSON)
    for action, body in steps:
        answer = await admin.post(f"/deployments/gate/{action}", content=dumps(body), headers=JSON)
        assert answer.status_code == 200, answer.text
    await define(
        admin, id="r", types=["frame"], kind="k", queue="q", max_retries=0,
        service="gate", on_model_mismatch="rollback",
    )  # fmt: skip


async def test_a_mismatch_on_the_only_version_does_not_leave_the_service_serving_nothing(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    """The first version of a service, rolled out (all traffic: nothing else serves) but
    not promoted yet: there is nothing to roll back to. docs/scheduler.md: "When there is
    nothing to roll back to: rollback_failed, an alert says why, and the task stays dead".
    The scheduler dropped the only version instead: the service served nothing, and the
    task was requeued onto no model at all."""
    await gate(admin, ("rollouts", {"model": "faces", "version": "1"}))
    await post(admin, type="frame")
    await catch_up(app)
    leased = await lease(worker, "q")
    assert leased is not None
    dead = await fail(worker, leased, "model_version_mismatch")
    await catch_up(app)
    deployment = (await admin.get("/deployments/gate")).json()
    assert deployment["traffic"] == {"1": 100}, deployment
    assert (dead["state"], dead["disposition"]) == ("dead", "rollback_failed")
    assert await events_of_type(admin, "causeway.deployment.rolled_back") == []
    assert (await queues(admin))["q"]["alerts"] == 1


async def test_an_operators_canary_rollback_does_not_spare_the_stable_version(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    """Stable 2 (1 before it) with a canary of 3. A task leased then fails with a model
    mismatch after an operator dropped the canary: it is requeued (the deployment changed
    since it ran). It fails so again on 2, which nobody rolled back: the scheduler owes
    the rollback (docs: flagged only on the deployment the task's own rollback left, or
    on the one *another task's* rollback requeued it onto). It took the operator's
    canary rollback for such a one, flagged the task, and left 2 serving."""
    await gate(
        admin,
        ("rollouts", {"model": "faces", "version": "1"}),
        ("promote", {}),
        ("rollouts", {"model": "faces", "version": "2", "percent": 100}),
        ("promote", {}),
        ("rollouts", {"model": "faces", "version": "3", "percent": 10}),
    )
    await post(admin, type="frame")
    await catch_up(app)
    leased = await lease(worker, "q")
    assert leased is not None
    body = {"reason": "canary 3 latency", "version": "3"}
    dropped = await admin.post("/deployments/gate/rollback", content=dumps(body), headers=JSON)
    assert dropped.status_code == 200, dropped.text
    assert (await fail(worker, leased, "model_version_mismatch"))["state"] == "ready"
    again = await lease(worker, "q")  # runs on 2, the only version serving
    assert again is not None
    after = await fail(worker, again, "model_version_mismatch")
    await catch_up(app)
    deployment = (await admin.get("/deployments/gate")).json()
    rollbacks = await events_of_type(admin, "causeway.deployment.rolled_back")
    assert (after["state"], deployment["stable_version"], len(rollbacks)) == ("ready", "1", 2)


async def test_an_operators_rollout_landing_during_the_rollback_is_left_standing(
    app: FastAPI, admin: Client, worker: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler decides its rollback on the deployment it read; an operator's rollout
    appended between that read and the rollback's append wins the stream: the scheduler
    decides again on the deployment as it now is (changed since the task ran: a requeue
    only), never a 409 or 500 for the worker, and the new canary is not dropped."""
    await gate(
        admin,
        ("rollouts", {"model": "faces", "version": "1"}),
        ("promote", {}),
        ("rollouts", {"model": "faces", "version": "2", "percent": 100}),
        ("promote", {}),
    )
    await post(admin, type="frame")
    await catch_up(app)
    leased = await lease(worker, "q")
    assert leased is not None
    original = DeploymentReader.fetch_state
    raced: list[httpx2.Response] = []

    async def read_then_race(self: DeploymentReader, *args: Any, **kwargs: Any) -> Any:
        state = await original(self, *args, **kwargs)
        if not raced:
            raced.append(httpx2.Response(0))  # once, and not for the operator's own read
            body = {"model": "faces", "version": "3", "percent": 10}
            raced[0] = await admin.post(
                "/deployments/gate/rollouts", content=dumps(body), headers=JSON
            )
        return state

    monkeypatch.setattr(DeploymentReader, "fetch_state", read_then_race)
    after = await fail(worker, leased, "model_version_mismatch")
    monkeypatch.undo()
    assert raced[0].status_code == 200, raced[0].text
    await catch_up(app)
    deployment = (await admin.get("/deployments/gate")).json()
    history = (await admin.get(f"/tasks/{leased['task']['id']}")).json()["history"]
    dead = next(h for h in history if h["type"] == "causeway.task.dead_lettered")
    assert (after["state"], dead["data"]["disposition"]) == ("ready", "deployment_changed")
    assert deployment["traffic"] == {"3": 10, "2": 90}
    assert await events_of_type(admin, "causeway.deployment.rolled_back") == []


async def test_a_canary_at_zero_percent_is_not_what_a_mismatch_rolls_back(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    await gate(
        admin,
        ("rollouts", {"model": "faces", "version": "1"}),
        ("promote", {}),
        ("rollouts", {"model": "faces", "version": "2", "percent": 0}),
    )
    await post(admin, type="frame")
    await catch_up(app)
    leased = await lease(worker, "q")  # every request goes to 1: the canary takes none
    assert leased is not None
    await fail(worker, leased, "model_version_mismatch")
    await catch_up(app)
    deployment = (await admin.get("/deployments/gate")).json()
    assert deployment["candidate_version"] == "2", deployment
    history = (await admin.get(f"/tasks/{leased['task']['id']}")).json()["history"]
    dead = next(h for h in history if h["type"] == "causeway.task.dead_lettered")
    assert dead["data"]["disposition"] == "rollback_failed", dead
    alerts = await events_of_type(admin, "causeway.alert.raised")
    assert any("takes no traffic" in str(a["data"]) for a in alerts), alerts
