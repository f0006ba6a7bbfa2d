"""Deployment commands sent with an ``Idempotency-Key``: a command sent again (its answer
lost) is answered as the first was and changes nothing; the key sent with another command
is refused; a malformed key is a 400."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest
from fastapi import FastAPI

from app.store.deployment_commands import DeploymentCommands
from app.store.deployment_reads import DeploymentReader
from tests.integration.events import JSON, dumps, registration


@pytest.fixture(autouse=True)
async def canary(admin: httpx2.AsyncClient) -> None:
    """Service ``gate``: version 1 stable, version 2 its canary at 10 percent."""
    for version in ("1", "2"):
        body = registration(version)
        assert (await admin.post("/models/faces/versions", content=body, headers=JSON)).is_success
    assert (await command(admin, "rollouts", model="faces", version="1")).is_success
    assert (await command(admin, "promote")).is_success
    assert (await command(admin, "rollouts", model="faces", version="2", percent=10)).is_success


async def command(
    admin: httpx2.AsyncClient, action: str, key: str | None = None, **body: Any
) -> httpx2.Response:
    headers = JSON if key is None else {**JSON, "Idempotency-Key": key}
    return await admin.post(f"/deployments/gate/{action}", content=dumps(body), headers=headers)


async def logged(app: FastAPI) -> list[str]:
    """The types of gate's deployment events in the log, in order."""
    async with app.state.engine.connect() as conn:
        changes = await DeploymentReader(conn).read_changes_after("acme", "gate", 0)
    return [c.type.removeprefix("causeway.deployment.") for c in changes]


async def test_a_traffic_shift_sent_again_is_answered_as_before_and_logged_once(
    admin: httpx2.AsyncClient, app: FastAPI
) -> None:
    first = await command(admin, "traffic", key='"ramp-50"', percent=50, reason="ok")
    again = await command(admin, "traffic", key='"ramp-50"', percent=50, reason="ok")
    assert first.status_code == again.status_code == 200, again.text
    assert again.json() == first.json()
    assert again.headers["Causeway-Position"] == first.headers["Causeway-Position"]
    assert await logged(app) == [
        "rollout_started",
        "promoted",
        "rollout_started",
        "traffic_shifted",
    ]
    # A key is its own: another shifts again.
    other = await command(admin, "traffic", key='"ramp-50-b"', percent=50, reason="ok")
    assert other.json()["position"] > first.json()["position"]


async def test_a_retry_after_later_changes_gets_the_first_answer_not_a_conflict(
    admin: httpx2.AsyncClient, app: FastAPI
) -> None:
    promoted = await command(admin, "promote", key='"promote-2"')
    assert promoted.json()["stable_version"] == "2"
    rolled_back = await command(admin, "rollback", key='"back"', reason="2 regressed")
    assert rolled_back.json()["stable_version"] == "1"
    # The promotion's answer was lost; sent again after the rollback, it is not done
    # again (2 stays rolled back), and it is answered with the state it left.
    again = await command(admin, "promote", key='"promote-2"')
    assert again.status_code == 200, again.text
    assert again.json() == promoted.json()
    assert (await logged(app))[-2:] == ["promoted", "rolled_back"]


@pytest.mark.parametrize(
    ("action", "body"),
    [
        ("traffic", {"percent": 60, "reason": "ok"}),  # another share
        ("traffic", {"percent": 50, "reason": "other"}),  # another reason
        ("promote", {}),  # another command
    ],
)
async def test_the_key_sent_with_another_command_is_refused_and_nothing_written(
    admin: httpx2.AsyncClient, app: FastAPI, action: str, body: dict[str, Any]
) -> None:
    first = await command(admin, "traffic", key='"k1"', percent=50, reason="ok")
    assert first.status_code == 200
    before = await logged(app)
    refused = await command(admin, action, key='"k1"', **body)
    assert refused.status_code == 422, refused.text
    problem = refused.json()
    assert problem["type"] == "/problems/idempotency-key-reused"
    assert problem["position"] == first.json()["position"]
    assert await logged(app) == before


async def test_the_same_command_sent_at_once_is_done_once(
    admin: httpx2.AsyncClient, app: FastAPI
) -> None:
    answers = await asyncio.gather(
        *(command(admin, "traffic", key="burst", percent=30, reason="ok") for _ in range(6))
    )
    assert [a.status_code for a in answers] == [200] * 6, [a.text for a in answers]
    assert len({a.json()["position"] for a in answers}) == 1
    assert (await logged(app)).count("traffic_shifted") == 1


async def test_a_quoted_key_and_the_same_key_bare_are_one_key(
    admin: httpx2.AsyncClient, app: FastAPI
) -> None:
    first = await command(admin, "traffic", key='"run-7"', percent=40, reason="ok")
    again = await command(admin, "traffic", key="run-7", percent=40, reason="ok")
    assert again.json() == first.json(), again.text
    # An escaped quote is part of the key: "a\"b" is a"b, not a\"b.
    escaped = await command(admin, "traffic", key='"a\\"b"', percent=40, reason="ok")
    assert escaped.json()["position"] > first.json()["position"], escaped.text
    assert (await logged(app)).count("traffic_shifted") == 2


@pytest.mark.parametrize(
    "key", ['""', '"' + "k" * 254 + '"', '"tab\there"', "two words", '"open', '"a\\"']
)
async def test_a_malformed_key_is_refused_and_nothing_written(
    admin: httpx2.AsyncClient, app: FastAPI, key: str
) -> None:
    before = await logged(app)
    refused = await command(admin, "traffic", key=key, percent=50, reason="ok")
    assert refused.status_code == 422, refused.text
    assert refused.json()["type"] == "/problems/invalid-request"
    assert "idempotency-key" in refused.text.lower()
    assert await logged(app) == before


async def test_the_longest_key_is_taken(admin: httpx2.AsyncClient) -> None:
    longest = "k" * 255
    first = await command(admin, "traffic", key=longest, percent=50, reason="ok")
    again = await command(admin, "traffic", key=longest, percent=50, reason="ok")
    assert first.status_code == 200, first.text
    assert again.json() == first.json()


async def test_promotions_sent_at_once_with_one_key_are_all_answered_as_the_first(
    admin: httpx2.AsyncClient, app: FastAPI
) -> None:
    """From a review: the retries that read the state after the first had landed decided
    on it ("no rollout to promote") and answered 409, though their command went through."""
    answers = await asyncio.gather(*(command(admin, "promote", key='"p2"') for _ in range(6)))
    assert [a.status_code for a in answers] == [200] * 6, [a.text for a in answers]
    assert len({a.json()["position"] for a in answers}) == 1
    assert (await logged(app)).count("promoted") == 2  # version 1's, and this one


async def test_a_retry_that_reads_the_state_the_first_left_is_answered_as_the_first(
    admin: httpx2.AsyncClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retry looked for its key before the first command landed, and read the
    service's state after it had: the same race, made certain."""
    real = DeploymentCommands.fetch_state
    retry_reads, first_landed = asyncio.Event(), asyncio.Event()

    async def fetch_state(self: DeploymentCommands, tenant: str, service: str) -> Any:
        if not retry_reads.is_set():  # the retry's read: it found no key stored yet
            retry_reads.set()
            await first_landed.wait()
        return await real(self, tenant, service)

    monkeypatch.setattr(DeploymentCommands, "fetch_state", fetch_state)
    retry = asyncio.create_task(command(admin, "promote", key='"p2"'))
    await retry_reads.wait()
    first = await command(admin, "promote", key='"p2"')
    assert first.status_code == 200, first.text
    first_landed.set()
    again = await retry
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    assert (await logged(app)).count("promoted") == 2


async def test_a_key_is_the_tenants_not_the_services(admin: httpx2.AsyncClient) -> None:
    """From a review: a key sent for a rollout on one service and then, with the same
    body, on another started a second rollout."""
    body = dumps({"model": "faces", "version": "1"})
    headers = {**JSON, "Idempotency-Key": '"deploy-1"'}
    first = await admin.post("/deployments/door/rollouts", content=body, headers=headers)
    assert first.status_code == 200, first.text
    other = await admin.post("/deployments/hall/rollouts", content=body, headers=headers)
    assert other.status_code == 422, other.text
    assert "rollout_started on 'door'" in other.json()["detail"]
    assert (await admin.get("/deployments/hall")).status_code == 404
