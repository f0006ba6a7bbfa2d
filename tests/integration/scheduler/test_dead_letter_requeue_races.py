"""A bulk requeue racing a single requeue or discard of the same dead letters: each dead
letter gets one decision, never two requeues nor a requeue and a discard."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI

from tests.integration.conftest import catch_up
from tests.integration.events import JSON, dumps
from tests.integration.scheduler.conftest import Client, define, events_of_type, fail, lease, post


async def _dead(app: FastAPI, admin: Client, worker: Client, n: int) -> list[str]:
    await define(admin, id="r", types=["job"], kind="k", queue="q", max_retries=0)
    for _ in range(n):
        await post(admin, type="job")
    await catch_up(app)
    died = []
    while (leased := await lease(worker, "q")) is not None:
        assert (await fail(worker, leased, "transient"))["state"] == "dead"
        died.append(leased["task"]["id"])
    assert len(died) == n
    return died


async def test_bulk_and_single_requeues_and_discards_decide_each_once(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    died = await _dead(app, admin, worker, 12)
    singles = []
    for n, task in enumerate(died):
        if n % 2:
            singles.append(admin.post(f"/dead-letters/{task}/requeue", content=b"{}", headers=JSON))
        else:
            body = dumps({"reason": "no"})
            singles.append(admin.post(f"/dead-letters/{task}/discard", content=body, headers=JSON))
    bulks = [
        admin.post("/dead-letters/requeue", content=dumps({"limit": 5}), headers=JSON)
        for _ in range(3)
    ]
    answers = await asyncio.gather(*bulks, *singles)
    assert {a.status_code for a in answers} <= {200, 409}, [a.text for a in answers]
    bulk_ids = [t["id"] for a in answers[:3] for t in a.json()["requeued"]]
    single_ok = [died[n] for n, a in enumerate(answers[3:]) if a.status_code == 200]
    assert sorted(bulk_ids + single_ok) == sorted(set(bulk_ids + single_ok)), "decided twice"
    decisions = [
        e
        for t in ("causeway.task.requeued", "causeway.task.discarded")
        for e in await events_of_type(admin, t)
    ]
    per_task: dict[str, int] = {}
    for e in decisions:
        per_task[e["data"]["task_id"]] = per_task.get(e["data"]["task_id"], 0) + 1
    assert all(n == 1 for n in per_task.values()), per_task
    assert set(per_task) == set(died)
    # Every 409 names a dead letter someone else decided
    for n, a in enumerate(answers[3:]):
        if a.status_code == 409:
            assert died[n] in bulk_ids, (died[n], a.text)
