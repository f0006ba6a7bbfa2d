"""Failures over HTTP on a real PostgreSQL: retries with backoff, dead letters by
class (flagged, archived with their input), and the rollbacks a model mismatch brings."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from fastapi import FastAPI

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
    three_stable_versions_and_a_rollback_route,
)


class TestRetriesAndDeadLetters:
    async def test_failures_back_off_then_dead_letter_and_flag(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await define(
            admin, id="r", types=["job"], kind="k", queue="q", max_retries=2, backoff_base_s=1
        )
        await post(admin, type="job")
        await catch_up(app)
        delays = []
        for attempt in (1, 2):
            leased = await lease(worker, "q")
            assert leased is not None
            assert leased["task"]["attempts"] == attempt
            failed = await fail(worker, leased, "transient")
            assert failed["state"] == "ready"
            assert await lease(worker, "q") is None  # invisible until its retry time
            history = (await admin.get(f"/tasks/{leased['task']['id']}")).json()["history"]
            delays.append(history[-1]["data"]["delay_s"])
            await asyncio.sleep(delays[-1] + 0.05)
        assert 1 <= delays[0] <= 1.25
        assert 2 <= delays[1] <= 2.5
        last = await lease(worker, "q")
        assert last is not None
        dead = await fail(worker, last, "transient")
        assert (dead["state"], dead["disposition"]) == ("dead", "flagged")
        alerts = await events_of_type(admin, "causeway.alert.raised")
        assert [a["data"]["kind"] for a in alerts] == ["dead_letter"]
        listed = (await admin.get("/dead-letters", params={"class": "transient"})).json()
        assert [d["id"] for d in listed["dead_letters"]] == [last["task"]["id"]]
        assert (await admin.get("/dead-letters", params={"class": "data_invalid"})).json()[
            "dead_letters"
        ] == []
        one = (await admin.get(f"/dead-letters/{last['task']['id']}")).json()
        assert [(a["attempt"], a["outcome"], a["class"]) for a in one["failures"]] == [
            (1, "retried", "transient"), (2, "retried", "transient"), (3, "dead_lettered", "transient"),
        ]  # fmt: skip
        assert one["attempts"] == 3  # a count, as GET /dead-letters says it
        assert one["trigger_event"]["type"] == "job"
        assert (await queues(admin))["q"]["dead_letters"] == 1
        metrics = (await admin.get("/metrics")).text
        assert 'causeway_queue_dead_letters{queue="q"} 1.0' in metrics
        assert 'causeway_queue_alerts{queue="q"} 1.0' in metrics

        requeued = await admin.post(
            f"/dead-letters/{last['task']['id']}/requeue", content=b"{}", headers=JSON
        )
        assert (requeued.json()["state"], requeued.json()["attempts"]) == ("ready", 0)
        again = await lease(worker, "q")
        assert again is not None
        await worker.post(
            f"/tasks/{again['task']['id']}/fail",
            content=dumps({"lease": again["lease"], "class": "unknown", "message": "x"}),
            headers=JSON,
        )

    async def test_invalid_data_is_archived_with_its_input_for_training(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await define(admin, id="r", types=["job"], kind="k", queue="q", max_retries=0)
        trigger = await post(admin, type="job", data={"pixels": [1, 2, 3]})
        await catch_up(app)
        leased = await lease(worker, "q")
        assert leased is not None
        dead = await fail(worker, leased, "data_invalid")
        assert dead["disposition"] == "archived"
        [archived] = await events_of_type(admin, "causeway.task.dead_lettered")
        assert archived["data"]["input"]["id"] == trigger["id"]
        assert archived["data"]["input"]["data"] == {"pixels": [1, 2, 3]}
        discarded = await admin.post(
            f"/dead-letters/{leased['task']['id']}/discard",
            content=dumps({"reason": "kept in the archive"}),
            headers=JSON,
        )
        assert discarded.json()["state"] == "discarded"
        again = await admin.post(
            f"/dead-letters/{leased['task']['id']}/requeue", content=b"{}", headers=JSON
        )
        assert again.status_code == 409

    async def test_binary_data_is_archived_too(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        png = base64.b64encode(b"\x89PNG\r\n\x1a\n\x00\xff").decode()
        await define(admin, id="r", types=["frame"], kind="k", queue="q", max_retries=0)
        trigger = await post(
            admin, type="frame", datacontenttype="image/png", data=..., data_base64=png
        )
        await catch_up(app)
        leased = await lease(worker, "q")
        assert leased is not None
        assert (await fail(worker, leased, "data_invalid"))["disposition"] == "archived"
        [archived] = await events_of_type(admin, "causeway.task.dead_lettered")
        assert archived["data"]["input"] == {
            "id": trigger["id"],
            "type": "frame",
            "source": trigger["source"],
            "datacontenttype": "image/png",
            "data_base64": png,
        }

    async def test_a_model_mismatch_rolls_the_service_back_and_requeues(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await _gate(admin, ("rollouts", {"model": "faces", "version": "2", "percent": 100}),
                    ("promote", {}))  # fmt: skip
        await post(admin, type="frame")
        await catch_up(app)
        leased = await lease(worker, "q")
        assert leased is not None
        after = await fail(worker, leased, "model_version_mismatch")
        assert after["state"] == "ready"  # requeued behind the rollback
        await catch_up(app)
        deployment = (await admin.get("/deployments/gate")).json()
        assert deployment["stable_version"] == "1"
        assert "model_version_mismatch" in deployment["history"][-1]["reason"]
        history = (await admin.get(f"/tasks/{leased['task']['id']}")).json()["history"]
        assert [h["type"].rsplit(".", 1)[1] for h in history][-2:] == ["dead_lettered", "requeued"]

    async def test_mismatches_roll_a_service_back_once_not_once_each(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await three_stable_versions_and_a_rollback_route(admin)
        for _ in range(2):
            await post(admin, type="frame")
        await catch_up(app)
        first, second = await lease(worker, "q"), await lease(worker, "q")
        assert first is not None
        assert second is not None
        assert (await fail(worker, first, "model_version_mismatch"))["state"] == "ready"
        after = await fail(worker, second, "model_version_mismatch")
        assert after["state"] == "ready"  # requeued: the service changed since it ran
        history = (await admin.get(f"/tasks/{second['task']['id']}")).json()["history"]
        assert history[-2]["data"]["disposition"] == "deployment_changed"
        await catch_up(app)
        assert (await admin.get("/deployments/gate")).json()["stable_version"] == "2"

    async def test_a_task_rolls_its_service_back_once_however_often_it_fails(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        """A task that fails again on the deployment its own rollback left is flagged:
        it does not walk the service back through every stable version it had."""
        await three_stable_versions_and_a_rollback_route(admin)
        await post(admin, type="frame")
        await catch_up(app)
        leased = await lease(worker, "q")
        assert leased is not None
        assert (await fail(worker, leased, "model_version_mismatch"))["state"] == "ready"
        again = await lease(worker, "q")
        assert again is not None
        dead = await fail(worker, again, "model_version_mismatch")
        assert (dead["state"], dead["disposition"]) == ("dead", "flagged")
        await catch_up(app)
        assert (await admin.get("/deployments/gate")).json()["stable_version"] == "2"
        rollbacks = await events_of_type(admin, "causeway.deployment.rolled_back")
        assert len(rollbacks) == 1
        alerts = await events_of_type(admin, "causeway.alert.raised")
        assert "rolled service 'gate' back once already" in alerts[-1]["data"]["why"]
        assert (await queues(admin))["q"]["alerts"] == 1
        # Once the service has changed since (an operator rolled a version out), the
        # task's next mismatch is about that deployment: it may roll back again.
        body = {"model": "faces", "version": "3", "percent": 100}
        await admin.post("/deployments/gate/rollouts", content=dumps(body), headers=JSON)
        await admin.post("/deployments/gate/promote", content=b"{}", headers=JSON)
        task = leased["task"]["id"]
        await admin.post(f"/dead-letters/{task}/requeue", content=b"{}", headers=JSON)
        third = await lease(worker, "q")
        assert third is not None
        assert (await fail(worker, third, "model_version_mismatch"))["state"] == "ready"
        assert len(await events_of_type(admin, "causeway.deployment.rolled_back")) == 2

    async def test_an_operators_requeue_does_not_license_a_second_rollback(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        """The second task, requeued onto 2 by the first's rollback, takes that rollback
        for its own: an operator's requeue of its dead letter changes nothing of that (it
        rolled gate back to 1, as the requeue said nothing of the rollback before)."""
        await three_stable_versions_and_a_rollback_route(admin)  # gate: 1, 2, 3 (stable)
        for _ in range(2):
            await post(admin, type="frame")
        await catch_up(app)
        first, second = await lease(worker, "q"), await lease(worker, "q")
        assert first is not None
        assert second is not None
        for leased in (first, second):  # the first rolls gate back; the second goes onto 2
            assert (await fail(worker, leased, "model_version_mismatch"))["state"] == "ready"
        for _ in range(2):  # both fail again on 2: flagged, not rolled back to 1
            again = await lease(worker, "q")
            assert again is not None
            dead = await fail(worker, again, "model_version_mismatch")
            assert (dead["state"], dead["disposition"]) == ("dead", "flagged")
        task = second["task"]["id"]
        requeued = await admin.post(f"/dead-letters/{task}/requeue", content=b"{}", headers=JSON)
        assert requeued.status_code == 200, requeued.text
        third = await lease(worker, "q")
        assert third is not None
        assert third["task"]["id"] == task
        after = await fail(worker, third, "model_version_mismatch")
        await catch_up(app)
        stable = (await admin.get("/deployments/gate")).json()["stable_version"]
        rollbacks = await events_of_type(admin, "causeway.deployment.rolled_back")
        assert (after["state"], after["disposition"], stable, len(rollbacks)) == (
            "dead", "flagged", "2", 1,
        )  # fmt: skip

    async def test_a_task_requeued_onto_a_promotion_rolls_that_version_back(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        """Requeued onto version 2 because an operator promoted it while the task ran on
        1, the task that then fails on 2 rolls 2 back: nobody did (it was flagged, as if
        it had rolled gate back itself, and the bad version stayed)."""
        for version in ("1", "2"):
            await admin.post("/models/faces/versions", content=registration(version), headers=JSON)
        await _deploy(admin, "1")
        await define(
            admin, id="r", types=["frame"], kind="k", queue="q", max_retries=0,
            service="gate", on_model_mismatch="rollback",
        )  # fmt: skip
        await post(admin, type="frame")
        await catch_up(app)
        leased = await lease(worker, "q")  # runs on version 1
        assert leased is not None
        await _deploy(admin, "2")
        assert (await fail(worker, leased, "model_version_mismatch"))["state"] == "ready"
        history = (await admin.get(f"/tasks/{leased['task']['id']}")).json()["history"]
        assert history[-2]["data"]["disposition"] == "deployment_changed"
        again = await lease(worker, "q")  # runs on version 2, and fails the same way
        assert again is not None
        second = await fail(worker, again, "model_version_mismatch")
        await catch_up(app)
        stable = (await admin.get("/deployments/gate")).json()["stable_version"]
        rollbacks = await events_of_type(admin, "causeway.deployment.rolled_back")
        history = (await admin.get(f"/tasks/{leased['task']['id']}")).json()["history"]
        dead = [h for h in history if h["type"] == "causeway.task.dead_lettered"][-1]
        assert (dead["data"]["disposition"], second["state"], stable, len(rollbacks)) == (
            "rolled_back", "ready", "1", 1,
        )  # fmt: skip

    async def test_a_rollback_with_nothing_to_roll_back_to_is_recorded_so(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await define(
            admin, id="r", types=["frame"], kind="k", queue="q", max_retries=0,
            service="nowhere", on_model_mismatch="rollback",
        )  # fmt: skip
        await post(admin, type="frame")
        await catch_up(app)
        leased = await lease(worker, "q")
        assert leased is not None
        dead = await fail(worker, leased, "model_version_mismatch")
        assert (dead["state"], dead["disposition"]) == ("dead", "rollback_failed")
        assert (await queues(admin))["q"]["alerts"] == 1

    async def test_a_model_mismatch_only_proposes_a_rollback_by_default(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await define(
            admin, id="r", types=["frame"], kind="k", queue="q", max_retries=0, service="gate"
        )
        await post(admin, type="frame")
        await catch_up(app)
        leased = await lease(worker, "q")
        assert leased is not None
        dead = await fail(worker, leased, "model_version_mismatch")
        assert (dead["state"], dead["disposition"]) == ("dead", "rollback_proposed")
        [proposal] = await events_of_type(admin, "causeway.alert.raised")
        assert (proposal["data"]["kind"], proposal["data"]["service"]) == (
            "rollback_proposed",
            "gate",
        )


class TestDeadLetterPages:
    async def test_pages_follow_next_through_every_dead_letter_once(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        died = await _dead_letters(app, admin, worker, "q", 5)
        seen, sizes, after = [], [], None
        while True:
            params = {"limit": 2, **({"after": after} if after else {})}
            page = (await admin.get("/dead-letters", params=params)).json()
            seen += [d["id"] for d in page["dead_letters"]]
            sizes.append(len(page["dead_letters"]))
            if len(seen) == 2:  # one requeued meanwhile leaves the pages after it whole
                requeued = await admin.post(f"/dead-letters/{seen[0]}/requeue")
                assert requeued.status_code == 200, requeued.text
            if (after := page["next"]) is None:
                break
        assert (seen, sizes) == (died, [2, 2, 1])
        whole = (await admin.get("/dead-letters")).json()
        assert (len(whole["dead_letters"]), whole["next"]) == (4, None)

    async def test_a_cursor_it_did_not_give_is_a_bad_request(self, admin: Client) -> None:
        """Base64url that is no cursor of its is a 400 naming ``after``; what is not
        base64url breaks the documented pattern (422)."""
        for cursor, status in (
            ("nonsense", 400),
            (base64.urlsafe_b64encode(b"[1,2,3]").decode(), 400),
            ("\u00e9", 422),
            ("", 422),
        ):
            answer = await admin.get("/dead-letters", params={"after": cursor})
            assert answer.status_code == status, answer.text
            assert answer.headers["content-type"] == "application/problem+json"
            assert "after" in answer.text


async def _dead_letters(
    app: FastAPI, admin: Client, worker: Client, queue: str, n: int
) -> list[str]:
    """``n`` tasks of ``queue``, each dead-lettered at its first failure (oldest first)."""
    await define(
        admin, id=f"to-{queue}", types=[f"job-{queue}"], kind="k", queue=queue, max_retries=0
    )
    for _ in range(n):
        await post(admin, type=f"job-{queue}")
    await catch_up(app)
    died = []
    while (leased := await lease(worker, queue)) is not None:
        assert (await fail(worker, leased, "data_invalid"))["state"] == "dead"
        died.append(leased["task"]["id"])
    assert len(died) == n
    return died


class TestBulkRequeue:
    async def test_the_oldest_that_match_are_requeued_each_once(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        died = await _dead_letters(app, admin, worker, "q", 5)
        others = await _dead_letters(app, admin, worker, "other", 2)
        body = {"queue": "q", "limit": 3, "reason": "parser fixed"}
        first = await admin.post("/dead-letters/requeue", content=dumps(body), headers=JSON)
        assert first.status_code == 200, first.text
        assert [t["id"] for t in first.json()["requeued"]] == died[:3]
        assert first.json()["more"] is True
        assert {t["state"] for t in first.json()["requeued"]} == {"ready"}
        assert int(first.headers["Causeway-Position"]) > 0
        second = (
            await admin.post("/dead-letters/requeue", content=dumps(body), headers=JSON)
        ).json()
        assert ([t["id"] for t in second["requeued"]], second["more"]) == (died[3:], False)
        third = (
            await admin.post("/dead-letters/requeue", content=dumps(body), headers=JSON)
        ).json()
        assert third == {"requeued": [], "more": False}
        listed = (await admin.get("/dead-letters")).json()["dead_letters"]
        assert [d["id"] for d in listed] == others  # another queue's stay dead
        history = (await admin.get(f"/tasks/{died[0]}")).json()["history"]
        assert history[-1]["type"] == "causeway.task.requeued"
        assert history[-1]["data"]["reason"] == "parser fixed"
        again = await lease(worker, "q")  # back in the queue, attempts reset
        assert again is not None
        assert again["task"]["attempts"] == 1

    async def test_two_at_once_requeue_each_dead_letter_once(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        died = await _dead_letters(app, admin, worker, "q", 6)
        body = dumps({"class": "data_invalid"})
        answers = await asyncio.gather(
            *(admin.post("/dead-letters/requeue", content=body, headers=JSON) for _ in range(2))
        )
        assert [a.status_code for a in answers] == [200, 200]
        requeued = [t["id"] for a in answers for t in a.json()["requeued"]]
        assert sorted(requeued) == sorted(died)
        history = (await admin.get(f"/tasks/{died[0]}")).json()["history"]
        assert [h["type"] for h in history].count("causeway.task.requeued") == 1

    async def test_without_a_body_every_filter_is_left_out(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        died = await _dead_letters(app, admin, worker, "q", 2)
        others = await _dead_letters(app, admin, worker, "other", 1)
        answer = await admin.post("/dead-letters/requeue")
        assert answer.status_code == 200, answer.text
        assert [t["id"] for t in answer.json()["requeued"]] == died + others

    async def test_bad_requests_and_keys_that_may_not(self, admin: Client, worker: Client) -> None:
        for body, status in (
            ({"limit": 0}, 422),
            ({"limit": 101}, 422),
            ({"class": "cosmic_rays"}, 422),
            ({"queue": "no spaces"}, 422),
            ({"reasons": "typo"}, 422),
            ({"error_class": "transient"}, 422),  # the field is "class", as in the list
            ({"since": "yesterday"}, 400),
        ):
            answer = await admin.post("/dead-letters/requeue", content=dumps(body), headers=JSON)
            assert answer.status_code == status, (body, answer.text)
            assert answer.headers["content-type"] == "application/problem+json"
        refused = await worker.post("/dead-letters/requeue", content=b"{}", headers=JSON)
        assert refused.status_code == 403


async def _gate(admin: Client, *steps: tuple[str, dict[str, Any]]) -> None:
    """Versions 1 and 2 of ``faces``; service ``gate`` on version 1, then ``steps`` (each
    a deployment action and its body); a route whose model mismatches roll ``gate`` back,
    with no retries."""
    for version in ("1", "2"):
        response = await admin.post(
            "/models/faces/versions", content=registration(version), headers=JSON
        )
        assert response.status_code == 201, response.text
    for action, body in (("rollouts", {"model": "faces", "version": "1"}), ("promote", {}), *steps):
        response = await admin.post(
            f"/deployments/gate/{action}", content=dumps(body), headers=JSON
        )
        assert response.status_code == 200, response.text
    await define(
        admin, id="r", types=["frame"], kind="k", queue="q", max_retries=0,
        service="gate", on_model_mismatch="rollback",
    )  # fmt: skip


async def _canary(admin: Client) -> None:
    """Service ``gate``: version 1 stable, version 2 a canary at 10 %."""
    await _gate(admin, ("rollouts", {"model": "faces", "version": "2", "percent": 10}))


async def test_a_traffic_shift_while_the_task_ran_does_not_cancel_the_rollback(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    """A task that failed on a deployment whose serving versions changed since it was
    leased is only requeued; a traffic shift changes no version: the candidate the task
    failed on still serves (more of the traffic now), and the rollback is still owed."""
    await _canary(admin)
    await post(admin, type="frame")
    await catch_up(app)
    leased = await lease(worker, "q")
    assert leased is not None
    # The canary ramps on while the task runs (as an automated rollout does).
    shifted = await admin.post(
        "/deployments/gate/traffic", content=dumps({"percent": 50}), headers=JSON
    )
    assert shifted.status_code == 200, shifted.text
    await fail(worker, leased, "model_version_mismatch")
    history = (await admin.get(f"/tasks/{leased['task']['id']}")).json()["history"]
    dead = next(h for h in history if h["type"] == "causeway.task.dead_lettered")
    await catch_up(app)
    deployment = (await admin.get("/deployments/gate")).json()
    assert (dead["data"]["disposition"], deployment["candidate_version"]) == (
        "rolled_back",
        None,
    ), (dead["data"]["disposition"], deployment["traffic"])


async def test_tasks_requeued_by_a_rollback_do_not_walk_the_service_back_further(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    """Three tasks failing the same way on version 3 roll ``gate`` back once (to 2): the
    two requeued by the first's rollback take it for their own, and failing again on
    the deployment it left are flagged, not rolled back to 1."""
    await three_stable_versions_and_a_rollback_route(admin)
    for _ in range(3):
        await post(admin, type="frame")
    await catch_up(app)
    for _ in range(5):  # every task runs until it is dead
        leased = [found for found in [await lease(worker, "q") for _ in range(3)] if found]
        if not leased:
            break
        for found in leased:
            await fail(worker, found, "model_version_mismatch")
    await catch_up(app)
    rollbacks = await events_of_type(admin, "causeway.deployment.rolled_back")
    stable = (await admin.get("/deployments/gate")).json()["stable_version"]
    assert (len(rollbacks), stable) == (1, "2")


async def _deploy(admin: Client, version: str) -> None:
    """Version ``version`` of ``faces`` rolled out to service ``gate`` and promoted."""
    body = {"model": "faces", "version": version, "percent": 100}
    for action, sent in (("rollouts", body), ("promote", {})):
        answer = await admin.post(f"/deployments/gate/{action}", content=dumps(sent), headers=JSON)
        assert answer.status_code == 200, answer.text
