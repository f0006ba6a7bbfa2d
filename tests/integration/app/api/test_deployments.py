"""Deployments: commands and their refusals, the read model with history and as-of, the
SSE watch against a real server, and GraphQL."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
from fastapi import FastAPI
from sqlalchemy import URL

from app.store.deployment_reads import DeploymentReader
from tests.integration.conftest import catch_up
from tests.integration.events import JSON, SIGNATURE, dumps, registration
from tests.integration.process import create_key, environment, serving

WIDER_INPUT: dict[str, Any] = {
    **SIGNATURE,
    "inputs": [
        {"name": "image", "type": "binary"},
        {"name": "hint", "type": "string", "required": False},
    ],
}
NEW_REQUIRED: dict[str, Any] = {
    **SIGNATURE,
    "inputs": [{"name": "image", "type": "binary"}, {"name": "depth", "type": "double"}],
}


@pytest.fixture
async def models(admin: httpx2.AsyncClient) -> None:
    for version, signature in (("1", SIGNATURE), ("2", WIDER_INPUT), ("3", NEW_REQUIRED)):
        response = await admin.post(
            "/models/faces/versions", content=registration(version, signature), headers=JSON
        )
        assert response.status_code == 201


async def command(admin: httpx2.AsyncClient, action: str, **body: Any) -> httpx2.Response:
    return await admin.post(f"/deployments/gate/{action}", content=dumps(body), headers=JSON)


@pytest.mark.usefixtures("models")
class TestCommandsMeantForAVersion:
    """A command may name the version it is meant for; acting on another is a 409."""

    async def test_a_retried_rollback_does_not_also_roll_back_the_stable_version(
        self, admin: httpx2.AsyncClient, app: FastAPI
    ) -> None:
        # Stable 2 (1 before it), canary 3 rolled back; the same rollback sent again (a
        # retry after a lost answer) put 1 back in place of the healthy 2.
        for version in ("1", "2"):
            await command(admin, "rollouts", model="faces", version=version, force=True)
            await command(admin, "promote")
        await command(admin, "rollouts", model="faces", version="3", percent=5, force=True)
        first = await command(admin, "rollback", version="3", reason="canary 3 errors")
        assert first.json()["stable_version"] == "2", first.text
        again = await command(admin, "rollback", version="3", reason="canary 3 errors")
        assert again.status_code == 409, again.text
        assert "meant for version '3'" in again.json()["detail"]
        await catch_up(app)
        state = (await admin.get("/deployments/gate")).json()
        assert (state["stable_version"], state["candidate_version"]) == ("2", None), state
        # Naming the stable version rolls it back, as a rollback without a version does.
        back = await command(admin, "rollback", version="2", reason="2 regressed")
        assert back.json()["stable_version"] == "1", back.text

    async def test_a_shift_or_promotion_meant_for_one_canary_is_refused_on_another(
        self, admin: httpx2.AsyncClient
    ) -> None:
        await command(admin, "rollouts", model="faces", version="1")
        await command(admin, "promote")
        await command(admin, "rollouts", model="faces", version="2", percent=10)
        # Meanwhile another admin rolls 2 back and starts 3 at 1 percent.
        await command(admin, "rollback", reason="2 is bad")
        await command(admin, "rollouts", model="faces", version="3", percent=1, force=True)
        shifted = await command(admin, "traffic", percent=90, version="2")
        assert shifted.status_code == 409, shifted.text
        assert (await command(admin, "promote", version="2")).status_code == 409
        ramped = await command(admin, "traffic", percent=50, version="3")
        assert ramped.json()["traffic"] == {"3": 50, "1": 50}, ramped.text


@pytest.mark.parametrize(
    ("stable", "candidate", "exact"),
    [
        ("integer", "long", True),
        ("integer", "double", True),
        ("float", "double", True),
        # A 64-bit long does not fit a double's 53 bits, nor a float's 24; a 32-bit
        # integer does not fit a float: the candidate would change the values sent.
        ("long", "float", False),
        ("long", "double", False),
        ("integer", "float", False),
    ],
)
async def test_an_input_may_widen_only_to_a_type_that_holds_every_value(
    admin: httpx2.AsyncClient, stable: str, candidate: str, exact: bool
) -> None:
    for version, kind in (("1", stable), ("2", candidate)):
        signature = {**SIGNATURE, "inputs": [{"name": "x", "type": kind}]}
        response = await admin.post(
            "/models/m/versions", content=registration(version, signature), headers=JSON
        )
        assert response.status_code == 201, response.text
    await command(admin, "rollouts", model="m", version="1")
    await command(admin, "promote")
    answer = await command(admin, "rollouts", model="m", version="2", percent=10)
    if exact:
        assert answer.status_code == 200, answer.text
    else:
        assert answer.status_code == 409, answer.text
        assert f"was {stable}, the candidate takes {candidate}" in answer.json()["detail"]


@pytest.mark.usefixtures("models")
async def test_a_forced_rollout_says_so_in_the_log(admin: httpx2.AsyncClient) -> None:
    """force overrides the signature check; the decision's event now records that it did."""
    await command(admin, "rollouts", model="faces", version="1")
    await command(admin, "promote")
    plain = await command(admin, "rollouts", model="faces", version="2", percent=10)
    await command(admin, "rollback", reason="try the other")
    forced = await command(admin, "rollouts", model="faces", version="3", force=True)
    assert forced.status_code == 200, forced.text
    events = {}
    for answer in (plain, forced):
        replay = await admin.get(
            "/replay", params={"after": answer.json()["position"] - 1, "limit": 1}
        )
        events[answer] = orjson.loads(replay.text)["data"]
    assert "force" not in events[plain]
    assert events[forced]["force"] is True


@pytest.mark.usefixtures("models")
class TestCommands:
    async def test_rollout_traffic_promote_and_rollback(self, admin: httpx2.AsyncClient) -> None:
        first = await command(admin, "rollouts", model="faces", version="1", percent=10)
        assert first.json()["candidate_percent"] == 100  # nothing stable yet takes the rest
        assert (await command(admin, "promote")).json()["stable_version"] == "1"
        canary = await command(admin, "rollouts", model="faces", version="2", percent=10)
        assert canary.json()["traffic"] == {"2": 10, "1": 90}
        shifted = await command(admin, "traffic", percent=50, reason="looks good")
        assert shifted.json()["traffic"] == {"2": 50, "1": 50}
        promoted = await command(admin, "promote")
        assert (promoted.json()["stable_version"], promoted.json()["status"]) == ("2", "stable")
        back = await command(admin, "rollback", reason="latency up")
        assert back.json()["stable_version"] == "1"
        assert back.json()["traffic"] == {"1": 100}

    async def test_a_model_that_enforces_its_outputs_can_be_rolled_out(
        self, admin: httpx2.AsyncClient
    ) -> None:
        # The rollout's own event names the version; it carries no model output to check.
        body = registration("1", enforce_outputs=True)
        assert (await admin.post("/models/strict/versions", content=body, headers=JSON)).is_success
        rollout = await admin.post(
            "/deployments/gate/rollouts", content=dumps({"model": "strict", "version": "1"}),
            headers=JSON,
        )  # fmt: skip
        assert rollout.status_code == 200, rollout.text

    async def test_promote_needs_no_body(self, admin: httpx2.AsyncClient) -> None:
        await command(admin, "rollouts", model="faces", version="1")
        promoted = await admin.post("/deployments/gate/promote")
        assert promoted.status_code == 200, promoted.text
        assert promoted.json()["stable_version"] == "1"

    async def test_a_service_that_serves_nothing_takes_another_model(
        self, admin: httpx2.AsyncClient
    ) -> None:
        await admin.post("/models/plates/versions", content=registration("1"), headers=JSON)
        await command(admin, "rollouts", model="faces", version="1")
        await command(admin, "rollback", reason="wrong model")
        other = await command(admin, "rollouts", model="plates", version="1")
        assert other.status_code == 200, other.text
        assert other.json()["traffic"] == {"1": 100}
        # Once it serves a model, another one is refused, as before.
        await command(admin, "promote")
        refused = await command(admin, "rollouts", model="faces", version="2")
        assert refused.status_code == 409
        assert "serves model 'plates'" in refused.json()["detail"]

    async def test_a_rollback_during_a_rollout_drops_the_candidate(
        self, admin: httpx2.AsyncClient
    ) -> None:
        await command(admin, "rollouts", model="faces", version="1")
        await command(admin, "promote")
        await command(admin, "rollouts", model="faces", version="2", percent=20)
        dropped = await command(admin, "rollback", reason="errors")
        assert (dropped.json()["stable_version"], dropped.json()["candidate_version"]) == (
            "1",
            None,
        )

    @pytest.mark.parametrize(
        ("steps", "status", "problem"),
        [
            ([("promote", {})], 409, "/problems/conflict"),
            ([("traffic", {"percent": 5})], 409, "/problems/conflict"),
            ([("rollback", {"reason": "why"})], 409, "/problems/conflict"),
            ([("rollback", {})], 422, "/problems/invalid-request"),
            # An unregistered version: nothing of that name is stored.
            ([("rollouts", {"model": "faces", "version": "9"})], 404, "/problems/not-found"),
            (
                [
                    ("rollouts", {"model": "faces", "version": "1"}),
                    ("rollouts", {"model": "faces", "version": "2"}),
                ],
                409,
                "/problems/conflict",
            ),
            ([("traffic", {"percent": 101})], 422, "/problems/invalid-request"),
            # U+0000 cannot be stored: refused naming the field, not by PostgreSQL (400).
            ([("rollback", {"reason": "x\u0000"})], 422, "/problems/invalid-request"),
            (
                [("rollouts", {"model": "faces", "version": "1", "reason": "\u0000"})],
                422,
                "/problems/invalid-request",
            ),
        ],
    )
    async def test_invalid_transitions_are_refused(
        self,
        admin: httpx2.AsyncClient,
        steps: list[tuple[str, dict[str, Any]]],
        status: int,
        problem: str,
    ) -> None:
        *before, (action, body) = steps
        for earlier_action, earlier_body in before:
            assert (await command(admin, earlier_action, **earlier_body)).status_code == 200
        response = await command(admin, action, **body)
        assert response.status_code == status, response.text
        assert response.json()["type"] == problem

    async def test_an_incompatible_signature_needs_force(self, admin: httpx2.AsyncClient) -> None:
        await command(admin, "rollouts", model="faces", version="1")
        await command(admin, "promote")
        refused = await command(admin, "rollouts", model="faces", version="3")
        assert refused.status_code == 409  # with the stable version's signature
        assert refused.json()["type"] == "/problems/conflict"
        assert "requires input 'depth'" in refused.json()["detail"]
        forced = await command(admin, "rollouts", model="faces", version="3", force=True)
        assert forced.status_code == 200

    async def test_another_models_version_is_refused_for_the_model_not_its_signature(
        self, admin: httpx2.AsyncClient
    ) -> None:
        # Its signature would not take faces' inputs either: that was a 422 that offered
        # force, and force then got this 409.
        body = registration("1", NEW_REQUIRED)
        assert (await admin.post("/models/plates/versions", content=body, headers=JSON)).is_success
        await command(admin, "rollouts", model="faces", version="1")
        await command(admin, "promote")
        refused = await command(admin, "rollouts", model="plates", version="1")
        assert refused.status_code == 409, refused.text
        assert "serves model 'faces', not 'plates'" in refused.json()["detail"]

    async def test_concurrent_commands_on_one_service_cannot_both_win(
        self, admin: httpx2.AsyncClient
    ) -> None:
        await command(admin, "rollouts", model="faces", version="1")
        answers = await asyncio.gather(*(command(admin, "promote") for _ in range(4)))
        assert sorted(a.status_code for a in answers) == [200, 409, 409, 409]


@pytest.mark.usefixtures("models")
class TestReadModel:
    async def test_history_and_as_of(self, admin: httpx2.AsyncClient, app: FastAPI) -> None:
        await command(admin, "rollouts", model="faces", version="1", reason="first")
        await command(admin, "promote")
        await catch_up(app)
        between = (await admin.get("/deployments/gate")).json()["updated_at"]
        await asyncio.sleep(0.01)
        await command(admin, "rollouts", model="faces", version="2", percent=30)
        await catch_up(app)
        now = (await admin.get("/deployments/gate")).json()
        assert now["traffic"] == {"2": 30, "1": 70}
        assert [h["action"] for h in now["history"]] == [
            "rollout_started",
            "promoted",
            "rollout_started",
        ]
        assert now["history"][0]["reason"] == "first"
        assert now["history"][0]["actor"]
        then = (await admin.get("/deployments/gate", params={"at": between})).json()
        assert (then["stable_version"], then["candidate_version"]) == ("1", None)
        assert (
            await admin.get("/deployments/gate", params={"at": "2000-01-01T00:00:00Z"})
        ).status_code == 404
        listed = (await admin.get("/deployments")).json()["deployments"]
        assert [d["service"] for d in listed] == ["gate"]

    @pytest.mark.parametrize("sent", ["\u00b2", "abc", "-1", "9" * 30])
    async def test_a_last_event_id_the_stream_never_sent_is_a_400(
        self, admin: httpx2.AsyncClient, sent: str
    ) -> None:
        response = await admin.get(
            "/deployments/gate/watch", headers={b"Last-Event-ID": sent.encode("latin-1")}
        )
        assert response.status_code == 400
        assert response.headers["content-type"].startswith("application/problem+json")

    @pytest.mark.parametrize("how", ["header", "after"])
    async def test_a_resume_past_the_logs_head_is_a_409(
        self, admin: httpx2.AsyncClient, how: str
    ) -> None:
        """A position from another deployment, or from before a restore: resumed there,
        the watch said nothing until the log passed it, every change before unseen."""
        head = (await command(admin, "rollouts", model="faces", version="1")).json()["position"]
        past = str(head + 1000)
        headers = {"Last-Event-ID": past} if how == "header" else {}
        params = {"after": past} if how == "after" else {}
        async with asyncio.timeout(10):  # a watch taken would stream for ever
            response = await admin.get("/deployments/gate/watch", headers=headers, params=params)
        assert response.status_code == 409, response.text
        assert f"past the log's head ({head})" in response.json()["detail"]

    async def test_graphql_deployment_now_and_as_of(
        self, admin: httpx2.AsyncClient, app: FastAPI
    ) -> None:
        await command(admin, "rollouts", model="faces", version="1")
        await command(admin, "promote")
        await catch_up(app)
        query = '{ deployments { service stableVersion traffic history { action } } deployment(service: "gate", at: "2000-01-01T00:00:00Z") { service } }'
        data = (await admin.post("/graphql", json={"query": query})).json()["data"]
        assert data["deployments"] == [
            {
                "service": "gate",
                "stableVersion": "1",
                "traffic": {"1": 100},
                "history": [{"action": "rollout_started"}, {"action": "promoted"}],
            }
        ]
        assert data["deployment"] is None

    @pytest.mark.parametrize("read", ["rest", "graphql"])
    async def test_a_state_and_its_history_agree_while_the_read_model_moves(
        self, admin: httpx2.AsyncClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch, read: str
    ) -> None:
        await command(admin, "rollouts", model="faces", version="1")
        await command(admin, "promote")
        await command(admin, "rollouts", model="faces", version="2", percent=10)
        await catch_up(app)
        await command(admin, "promote")
        # The projection commits the promotion while a read is between its statements: the
        # view read before it, the history after.
        for method in ("read_deployment", "read_deployments"):
            original = getattr(DeploymentReader, method)

            async def view_then_commit(*args: Any, _read: Any = original) -> Any:
                view = await _read(*args)
                await catch_up(app)
                return view

            monkeypatch.setattr(DeploymentReader, method, view_then_commit)
        if read == "rest":
            answer = (await admin.get("/deployments/gate")).json()
            keys = ("stable_version", "candidate_version")
        else:
            query = "{ deployments { stableVersion candidateVersion history { stableVersion candidateVersion } } }"
            [answer] = (await admin.post("/graphql", json={"query": query})).json()["data"][
                "deployments"
            ]
            keys = ("stableVersion", "candidateVersion")
        # As of the view's read: the promotion is in neither.
        assert [answer[k] for k in keys] == [answer["history"][-1][k] for k in keys] == ["1", "2"]
        assert len(answer["history"]) == 3


def test_watch_streams_promote_and_rollback_in_order(database_url: URL, tmp_path: Path) -> None:
    env = environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
    )
    key = create_key(env, "t", "admin")
    auth = {"Authorization": f"Bearer {key}"}
    seen: list[str] = []
    ids: list[str] = []
    with serving(env) as base:
        for version in ("1", "2"):
            httpx2.post(
                f"{base}/models/faces/versions",
                content=registration(version),
                headers={**JSON, **auth},
            )

        def post(action: str, **body: Any) -> None:
            response = httpx2.post(
                f"{base}/deployments/gate/{action}", content=dumps(body), headers={**JSON, **auth}
            )
            assert response.status_code == 200, response.text

        post("rollouts", model="faces", version="1")
        post("promote")
        ready = threading.Event()

        def watch() -> None:
            with httpx2.stream(
                "GET", f"{base}/deployments/gate/watch", headers=auth, timeout=30
            ) as stream:
                for line in stream.iter_lines():
                    ready.set()
                    if line.startswith("id: "):
                        ids.append(line.removeprefix("id: "))
                    if line.startswith("event: "):
                        seen.append(line.removeprefix("event: "))
                    if len(seen) == 3:
                        return

        watcher = threading.Thread(target=watch)
        watcher.start()
        assert ready.wait(10)
        post("rollouts", model="faces", version="2", percent=10)
        post("promote")
        post("rollback", reason="regression")
        watcher.join(30)

        def first_after(**headers: str) -> str:
            """The first change a reconnect to ``?after=0`` is sent."""
            with httpx2.stream(
                "GET", f"{base}/deployments/gate/watch?after=0", headers={**auth, **headers},
                timeout=30,
            ) as stream:  # fmt: skip
                for line in stream.iter_lines():
                    if line.startswith("event: "):
                        return line.removeprefix("event: ")
            raise AssertionError("the stream ended")

        # An EventSource reconnects to the same URL with the last id it saw: that wins.
        assert first_after() == "causeway.deployment.rollout_started"
        last_seen = ids[-2]  # the promote before the rollback
        assert first_after(**{"Last-Event-ID": last_seen}) == "causeway.deployment.rolled_back"
    assert seen == [
        "causeway.deployment.rollout_started",
        "causeway.deployment.promoted",
        "causeway.deployment.rolled_back",
    ]
