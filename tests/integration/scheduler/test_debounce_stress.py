"""Stress (from a review): workers failing debounced tasks (retries) while events of their
keys keep coming and the dispatcher and task book run beside them. Nothing may hang, the
dispatcher must not stop (the first version of the race fix stopped it two to four times
a run: a row lagging a supersede made in the log), and in the end no older task of a key
is waiting beside a newer one."""

from __future__ import annotations

import asyncio
import random

from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from scheduler.projections import Dispatcher, TaskBook
from tests.integration.conftest import catch_up
from tests.integration.events import JSON, dumps
from tests.integration.scheduler.conftest import Client, define, post

KEYS = ["a", "b", "c"]


async def test_retries_racing_the_dispatcher_under_load(
    app: FastAPI, admin: Client, worker: Client, engine: AsyncEngine
) -> None:
    await define(admin, id="r", types=["job"], kind="k", queue="q", backoff_base_s=0,
                 max_retries=50, debounce={"key": "user", "window_s": 3600})  # fmt: skip
    runner = app.state.runner
    stop = asyncio.Event()
    failures: list[str] = []

    keys = random.Random(7)  # noqa: S311 - test data, not secrecy

    async def producer() -> None:
        for n in range(60):
            await post(admin, type="job", data={"user": keys.choice(KEYS), "v": n})
            await asyncio.sleep(0.01)
        stop.set()

    async def projection(name: str) -> None:
        while not stop.is_set():
            try:
                await runner.catch_up(runner.projection(name))
            except Exception as exc:
                failures.append(f"{name}: {exc!r}"[:300])
            await asyncio.sleep(0)

    async def failer(w: str) -> None:
        while not stop.is_set():
            r = await worker.post("/queues/q/lease", content=dumps({"worker": w}), headers=JSON)
            if r.status_code == 204:
                await asyncio.sleep(0.005)
                continue
            assert r.status_code == 200, r.text
            leased = r.json()
            body = {"lease": leased["lease"], "class": "transient", "message": "x"}
            f = await worker.post(f"/tasks/{leased['task']['id']}/fail",
                                  content=dumps(body), headers=JSON)  # fmt: skip
            assert f.status_code == 200, f.text

    await asyncio.wait_for(
        asyncio.gather(
            producer(), projection(Dispatcher.name), projection(TaskBook.name),
            *(failer(f"w{i}") for i in range(4)),
        ),
        timeout=120,
    )  # fmt: skip
    await catch_up(app)
    async with engine.connect() as conn:
        rows = (await conn.execute(text(
            "SELECT debounce_key, id, state, trigger_time, seq FROM tasks "
            "WHERE tenant = 'acme' ORDER BY debounce_key, trigger_time, seq"
        ))).all()  # fmt: skip
    stale = []
    for key in KEYS:
        mine = [r for r in rows if r.debounce_key == key]
        live = [r for r in mine if r.state not in ("superseded", "discarded")]
        if len(live) > 1:
            stale.append((key, [(r.state, str(r.trigger_time)) for r in live]))
    assert not stale, stale
    assert not failures, (len(failures), failures[:3])
