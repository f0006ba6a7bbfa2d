"""A dead letter of a debounced key that an operator requeued went back to ready even when
a newer task of its key had come since (pending, leased or done): the stale input ran
after the newer input for the same key. Its requeue, one by one or in bulk, now
supersedes it by the newest task of its key, keeping who requeued it and why."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI

from scheduler import tasks as t
from tests.integration.conftest import catch_up
from tests.integration.events import JSON, dumps, registration
from tests.integration.scheduler.conftest import Client, define, events_of_type, fail, lease, post


async def _dead_then_newer(app: FastAPI, admin: Client, worker: Client) -> tuple[str, str]:
    """v1 of key ``u`` dead-lettered, then v2 of ``u`` made (pending): their task ids."""
    await define(admin, id="r", types=["job"], kind="k", queue="q", max_retries=0,
                 debounce={"key": "user", "window_s": 60})  # fmt: skip
    v1 = await post(admin, type="job", data={"user": "u", "v": 1})
    await catch_up(app)
    older = await lease(worker, "q")
    assert older is not None
    assert (await fail(worker, older, "transient"))["state"] == "dead"
    v2 = await post(admin, type="job", data={"user": "u", "v": 2})
    await catch_up(app)
    return t.task_id_for("acme", "r", v1["id"]), t.task_id_for("acme", "r", v2["id"])


def _key_id(client: Client) -> str:
    """The id of the key ``client`` sends (``cw_<id>_<secret>``): a decision's actor."""
    return str(client.headers["Authorization"].split("_")[1])


async def _requeue(admin: Client, task_id: str) -> dict[str, Any]:
    response = await admin.post(
        f"/dead-letters/{task_id}/requeue", content=dumps({"reason": "fixed"}), headers=JSON
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


async def _lease_newer(worker: Client, newer_id: str, *, complete: bool) -> None:
    """Lease the newer task (the only one ready), and complete it when ``complete``."""
    newer = await lease(worker, "q")
    assert newer is not None
    assert newer["task"]["id"] == newer_id
    if complete:
        done = await worker.post(
            f"/tasks/{newer_id}/complete",
            content=dumps({"lease": newer["lease"], "events": []}),
            headers=JSON,
        )
        assert done.status_code == 200, done.text


@pytest.mark.parametrize("newer_is", ["pending", "leased", "completed"])
async def test_a_requeued_dead_letter_is_superseded_by_a_newer_task_of_its_key(
    app: FastAPI, admin: Client, worker: Client, newer_is: str
) -> None:
    older_id, newer_id = await _dead_then_newer(app, admin, worker)
    if newer_is != "pending":
        await _lease_newer(worker, newer_id, complete=newer_is == "completed")
    requeued = await _requeue(admin, older_id)
    assert requeued["state"] == "superseded", requeued
    [decision] = await events_of_type(admin, t.SUPERSEDED)
    newer_trigger = (await admin.get(f"/tasks/{newer_id}")).json()["trigger"]
    assert decision["data"]["by_task"] == newer_id
    assert decision["data"]["by"] == newer_trigger
    assert (decision["data"]["reason"], decision["data"]["actor"]) == ("fixed", _key_id(admin))
    # Caused by its dead letter and by the newer event, as a supersede by the dispatcher is.
    assert decision["causationid"].split(",") == [t.decision_id(older_id, 3), newer_trigger]
    # Nothing stale is offered: v1 never runs again.
    offered = await lease(worker, "q", worker="w2")
    if newer_is == "pending":
        assert offered is not None
        assert offered["task"]["id"] == newer_id
        offered = await lease(worker, "q", worker="w3")
    assert offered is None


async def test_a_requeued_dead_letter_with_no_newer_task_of_its_key_is_ready(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    await define(admin, id="r", types=["job"], kind="k", queue="q", max_retries=0,
                 debounce={"key": "user", "window_s": 60})  # fmt: skip
    await post(admin, type="job", data={"user": "u", "v": 1})
    await catch_up(app)
    older = await lease(worker, "q")
    assert older is not None
    await fail(worker, older, "transient")
    await post(admin, type="job", data={"user": "other", "v": 2})  # another key
    await catch_up(app)
    requeued = await _requeue(admin, older["task"]["id"])
    assert (requeued["state"], requeued["attempts"]) == ("ready", 0)


async def test_a_bulk_requeue_supersedes_the_stale_and_requeues_the_rest(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    """v1 and v2 of key ``u`` both dead, and x1 of another key: a bulk requeue puts back
    v2 and x1, and supersedes v1 by v2; the answer says so."""
    await define(admin, id="r", types=["job"], kind="k", queue="q", max_retries=0,
                 debounce={"key": "user", "window_s": 60})  # fmt: skip
    v1 = await post(admin, type="job", data={"user": "u", "v": 1})
    x1 = await post(admin, type="job", data={"user": "x", "v": 1})
    await catch_up(app)
    for _ in range(2):
        leased = await lease(worker, "q")
        assert leased is not None
        await fail(worker, leased, "transient")
    v2 = await post(admin, type="job", data={"user": "u", "v": 2})
    await catch_up(app)
    leased = await lease(worker, "q")
    assert leased is not None
    await fail(worker, leased, "transient")
    ids = {name: t.task_id_for("acme", "r", e["id"]) for name, e in
           (("v1", v1), ("x1", x1), ("v2", v2))}  # fmt: skip
    response = await admin.post(
        "/dead-letters/requeue", content=dumps({"reason": "fixed"}), headers=JSON
    )
    assert response.status_code == 200, response.text
    states = {task["id"]: task["state"] for task in response.json()["requeued"]}
    assert states == {ids["v1"]: "superseded", ids["x1"]: "ready", ids["v2"]: "ready"}
    [decision] = await events_of_type(admin, t.SUPERSEDED)
    assert (decision["data"]["by_task"], decision["data"]["actor"]) == (ids["v2"], _key_id(admin))
    offered = {(await lease(worker, "q", worker=w) or {}).get("task", {}).get("id")
               for w in ("w2", "w3", "w4")}  # fmt: skip
    assert offered == {ids["x1"], ids["v2"], None}
    assert (await admin.get(f"/tasks/{ids['v1']}")).json()["state"] == "superseded"


async def test_a_rollback_supersedes_the_stale_task_it_would_requeue(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    """A model mismatch rolls the service back and requeues the task behind the rollback;
    when a newer task of its debounce key came while it ran, that requeue put the stale
    input back beside the newer one. The rollback stands; the task is superseded."""
    for version in ("1", "2"):
        made = await admin.post(
            "/models/faces/versions", content=registration(version), headers=JSON
        )
        assert made.status_code == 201, made.text
    for action, body in (
        ("rollouts", {"model": "faces", "version": "1"}),
        ("promote", {}),
        ("rollouts", {"model": "faces", "version": "2", "percent": 100}),
        ("promote", {}),
    ):
        done = await admin.post(f"/deployments/gate/{action}", content=dumps(body), headers=JSON)
        assert done.status_code == 200, done.text
    await define(admin, id="r", types=["job"], kind="k", queue="q", max_retries=0,
                 debounce={"key": "user", "window_s": 60}, service="gate",
                 on_model_mismatch="rollback")  # fmt: skip
    await post(admin, type="job", data={"user": "u", "v": 1})
    await catch_up(app)
    older = await lease(worker, "q")
    assert older is not None
    v2 = await post(admin, type="job", data={"user": "u", "v": 2})  # while v1 runs
    await catch_up(app)
    after = await fail(worker, older, "model_version_mismatch")
    assert after["state"] == "superseded", after
    newer_id = t.task_id_for("acme", "r", v2["id"])
    [decision] = await events_of_type(admin, t.SUPERSEDED)
    assert decision["data"]["by_task"] == newer_id
    assert decision["data"]["actor"] == "scheduler"
    await catch_up(app)
    assert (await admin.get("/deployments/gate")).json()["stable_version"] == "1"
    offered = await lease(worker, "q", worker="w2")
    assert offered is not None
    assert offered["task"]["id"] == newer_id
    assert await lease(worker, "q", worker="w3") is None


async def test_a_dead_letter_requeued_after_its_newer_task_was_discarded_runs(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    """From a review: v1 and v2 of key ``u`` both dead, the operator discards v2 (bad
    input) and then requeues v1: it was superseded by the discarded v2, and nothing of
    the key ever ran. A discarded task's input no longer stands: v1 is put back."""
    v1_id, v2_id = await _dead_then_newer(app, admin, worker)
    leased = await lease(worker, "q")
    assert leased is not None
    assert leased["task"]["id"] == v2_id
    await fail(worker, leased, "data_invalid")
    dropped = await admin.post(
        f"/dead-letters/{v2_id}/discard", content=dumps({"reason": "bad input"}), headers=JSON
    )
    assert dropped.status_code == 200, dropped.text
    assert (await _requeue(admin, v1_id))["state"] == "ready"
    offered = await lease(worker, "q", worker="w2")
    assert offered is not None
    assert offered["task"]["id"] == v1_id
