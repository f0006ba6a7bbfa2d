"""The deployment commands: refusals store nothing, races have one winner
whose state the log and the read model agree on, and a rebuilt read model equals the
live one."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import orjson
import pytest
from fastapi import FastAPI

from tests.integration.conftest import catch_up
from tests.integration.events import JSON, SIGNATURE, dumps, registration

NEW_REQUIRED: dict[str, Any] = {
    **SIGNATURE,
    "inputs": [{"name": "image", "type": "binary"}, {"name": "depth", "type": "double"}],
}


@pytest.fixture
async def models(admin: httpx2.AsyncClient) -> None:
    for version, signature in (("1", SIGNATURE), ("2", SIGNATURE), ("3", NEW_REQUIRED)):
        response = await admin.post(
            "/models/faces/versions", content=registration(version, signature), headers=JSON
        )
        assert response.status_code == 201, response.text


async def command(admin: httpx2.AsyncClient, action: str, **body: Any) -> httpx2.Response:
    return await admin.post(f"/deployments/gate/{action}", content=dumps(body), headers=JSON)


async def deployment_events(admin: httpx2.AsyncClient) -> list[dict[str, Any]]:
    response = await admin.get("/replay", params={"stream": "causeway:deployment:gate"})
    assert response.status_code == 200, response.text
    return [orjson.loads(line) for line in response.text.splitlines() if line]


def assert_problem(response: httpx2.Response, status: int) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["detail"]


@pytest.mark.usefixtures("models")
class TestRefusalsStoreNothing:
    async def test_promote_and_rollback_of_a_service_never_deployed(
        self, admin: httpx2.AsyncClient
    ) -> None:
        assert_problem(await command(admin, "promote"), 409)
        assert_problem(await command(admin, "rollback", reason="why"), 409)
        assert_problem(await command(admin, "traffic", percent=5), 409)
        assert await deployment_events(admin) == []

    async def test_promote_without_a_canary_rollback_twice_promote_after_rollback(
        self, admin: httpx2.AsyncClient
    ) -> None:
        assert (await command(admin, "rollouts", model="faces", version="1")).is_success
        assert (await command(admin, "promote")).is_success
        assert_problem(await command(admin, "promote"), 409)  # no canary
        assert (await command(admin, "rollouts", model="faces", version="2")).is_success
        assert (await command(admin, "rollback", reason="bad")).is_success
        assert_problem(await command(admin, "promote"), 409)  # after the rollback
        assert_problem(await command(admin, "rollback", reason="again"), 409)  # nothing left
        assert_problem(await command(admin, "rollback"), 422)  # no reason
        assert [e["type"].rsplit(".", 1)[1] for e in await deployment_events(admin)] == [
            "rollout_started",
            "promoted",
            "rollout_started",
            "rolled_back",
        ]

    async def test_an_incompatible_signature_is_refused_and_stores_nothing(
        self, admin: httpx2.AsyncClient
    ) -> None:
        await command(admin, "rollouts", model="faces", version="1")
        await command(admin, "promote")
        assert_problem(await command(admin, "rollouts", model="faces", version="3"), 409)
        assert len(await deployment_events(admin)) == 2


@pytest.mark.usefixtures("models")
async def test_concurrent_promote_and_rollback_agree_with_the_log(
    admin: httpx2.AsyncClient, app: FastAPI
) -> None:
    """Both on the state they read: one wins, the other is a 409; or one after the other
    (a rollback after the promotion rolls the new stable back, as documented). Either
    way, each 200 is one event, and the read model shows the last answer."""
    await command(admin, "rollouts", model="faces", version="1")
    await command(admin, "promote")
    for _ in range(6):
        before = len(await deployment_events(admin))
        assert (await command(admin, "rollouts", model="faces", version="2", percent=30)).is_success
        promoted, rolled = await asyncio.gather(
            command(admin, "promote"), command(admin, "rollback", reason="race")
        )
        won = [a for a in (promoted, rolled) if a.status_code == 200]
        for lost in (a for a in (promoted, rolled) if a.status_code != 200):
            assert_problem(lost, 409)
        assert won
        events = await deployment_events(admin)
        assert len(events) == before + 1 + len(won)
        last = max(won, key=lambda a: int(a.json()["position"]))
        await catch_up(app)
        read = (await admin.get("/deployments/gate")).json()
        keys = ("stable_version", "candidate_version", "traffic", "position")
        assert {k: read[k] for k in keys} == {k: last.json()[k] for k in keys}
        assert read["position"] == events[-1]["position"] if "position" in events[-1] else True
        if read["stable_version"] == "2":
            assert (await command(admin, "rollback", reason="reset")).is_success


@pytest.mark.usefixtures("models")
async def test_a_rebuilt_read_model_equals_what_the_commands_answered(
    admin: httpx2.AsyncClient, app: FastAPI
) -> None:
    steps: list[tuple[str, dict[str, Any]]] = [
        ("rollouts", {"model": "faces", "version": "1"}),
        ("promote", {}),
        ("rollouts", {"model": "faces", "version": "2", "percent": 10}),
        ("traffic", {"percent": 40}),
        ("promote", {}),
        ("rollouts", {"model": "faces", "version": "3", "force": True, "percent": 5}),
        ("rollback", {"reason": "3 fails"}),
        ("rollback", {"reason": "2 regressed"}),
        ("rollouts", {"model": "faces", "version": "2", "percent": 50}),
    ]
    last: dict[str, Any] = {}
    for action, body in steps:
        answer = await command(admin, action, **body)
        assert answer.status_code == 200, answer.text
        last = answer.json()
    await catch_up(app)
    before = (await admin.get("/deployments/gate")).json()
    runner = app.state.runner
    [deployments] = [p for p in runner.projections if p.name == "deployments"]
    await runner.rebuild(deployments)
    after = (await admin.get("/deployments/gate")).json()
    assert after == before
    keys = ("stable_version", "candidate_version", "candidate_percent", "traffic", "position")
    assert {k: after[k] for k in keys} == {k: last[k] for k in keys}
    # And after the rebuild, a rollback of the stable version still restores 1 (the
    # previous stable versions survived the rebuild).
    await command(admin, "rollback", reason="drop 2")
    await command(admin, "rollouts", model="faces", version="2", percent=50)
    await catch_up(app)
