"""Tasks a 0017 release left (no ``debounce_on``, no ``lease_request``), driven by this
release after ``causeway migrate``: their leases run out, a newer event of an old
debounced key supersedes them, an old dead letter is requeued, and a worker leases."""

from __future__ import annotations

from fastapi import FastAPI
from sqlalchemy import URL

from tests.integration.conftest import asgi_client, catch_up
from tests.integration.events import JSON, STRUCTURED, dumps
from tests.integration.scheduler.test_debounce_after_lease import sweeper
from tests.integration.upgrades.conftest import OLD, rows


def states(url: URL) -> dict[str, str]:
    return {r["trigger_id"]: r["state"] for r in rows(url, "SELECT trigger_id, state FROM tasks")}


async def test_old_tasks_go_on_under_this_release(
    upgraded_app: FastAPI, upgraded_store: URL
) -> None:
    async with (
        asgi_client(upgraded_app, OLD["keys"]["admin"]) as admin,
        asgi_client(upgraded_app, OLD["keys"]["worker"]) as worker,
    ):
        # A newer event of "ann", whose 0017 task is leased (its lease ran out since).
        body = {"specversion": "1.0", "id": "profile-5", "source": "/users",
                "type": "profile.changed", "time": "2026-11-30T12:00:05Z",
                "data": {"user_id": "ann", "n": 5}}  # fmt: skip
        assert (
            await admin.post("/events", content=dumps(body), headers=STRUCTURED)
        ).status_code == 201
        await catch_up(upgraded_app)
        assert await sweeper(upgraded_app).expire_leases() == 2  # job-3's and profile-2's
        await catch_up(upgraded_app)
        now = states(upgraded_store)
        assert now["profile-2"] == "superseded", now  # not retried beside profile-5's
        assert now["profile-5"] == "ready", now
        assert now["job-3"] == "dead", now  # max_retries 0: its expired lease dead-letters it
        # The old dead letter is requeued and leased again, under a lease request id.
        [dead] = [d["id"] for d in OLD["dead_letters"]["dead_letters"]]
        requeued = await admin.post(f"/dead-letters/{dead}/requeue", content=b"{}", headers=JSON)
        assert requeued.status_code == 200, requeued.text
        await catch_up(upgraded_app)
        request = dumps({"worker": "w9", "request_id": "R1", "max_tasks": 10})
        first = await worker.post("/queues/q/lease", content=request, headers=JSON)
        assert first.status_code == 200, first.text
        again = await worker.post("/queues/q/lease", content=request, headers=JSON)
        assert again.status_code == 200, again.text
        assert again.json() == first.json()
