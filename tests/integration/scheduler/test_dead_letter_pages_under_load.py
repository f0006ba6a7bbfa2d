"""Paging through dead letters while others die and are requeued: a dead letter that was
dead before the walk began and stayed dead is shown once; one requeued meanwhile leaves
the pages after it whole; nothing is shown twice unless it died again."""

from __future__ import annotations

import asyncio
import random

from fastapi import FastAPI

from tests.integration.conftest import catch_up
from tests.integration.events import JSON
from tests.integration.scheduler.conftest import Client, define, fail, lease, post


async def _kill_all(worker: Client) -> list[str]:
    died = []
    while (leased := await lease(worker, "q")) is not None:
        assert (await fail(worker, leased, "transient"))["state"] == "dead"
        died.append(leased["task"]["id"])
    return died


async def test_a_walk_shows_every_dead_letter_that_stayed_dead_once(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    await define(admin, id="r", types=["job"], kind="k", queue="q", max_retries=0)
    for _ in range(30):
        await post(admin, type="job")
    await catch_up(app)
    before = await _kill_all(worker)
    rng = random.Random(7)  # noqa: S311 - picking victims, not secrecy
    requeued: set[str] = set()
    stop = asyncio.Event()

    async def churn() -> None:
        while not stop.is_set():
            victim = rng.choice(before)
            answer = await admin.post(
                f"/dead-letters/{victim}/requeue", content=b"{}", headers=JSON
            )
            if answer.status_code == 200:
                requeued.add(victim)
            await _kill_all(worker)  # the requeued die again, later
            await post(admin, type="job")
            await catch_up(app)
            await _kill_all(worker)

    async def walk() -> list[str]:
        seen: list[str] = []
        after = None
        while True:
            params = {"limit": 3, **({"after": after} if after else {})}
            page = (await admin.get("/dead-letters", params=params)).json()
            seen += [d["id"] for d in page["dead_letters"]]
            await asyncio.sleep(0)
            if (after := page["next"]) is None:
                return seen

    churner = asyncio.create_task(churn())
    try:
        seen = await walk()
    finally:
        stop.set()
        await churner
    stayed = [t for t in before if t not in requeued]
    assert [t for t in stayed if t not in seen] == []
    twice = {t for t in seen if seen.count(t) > 1}
    assert twice <= requeued, twice - requeued
