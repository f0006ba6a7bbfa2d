"""The task book's new lock (all rows it catches up, in task id order, before it folds)
under everything else that takes task rows at once: the dispatcher making tasks (a
debouncing route, which supersedes pending rows, and a plain one), leases, batch failures
and completions, the lease sweeper and the task book's steps: no request fails (no
deadlock, 500 or 503), no projection step fails, and every task row agrees with its
decisions in the log; with rebuilds of the task book beside them too (the rebuild
deadlocked with the commands, a 503 or a failed rebuild, and left rows behind the log,
before it emptied the rows in task id order and read the head after)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import URL

from app.main import create_app, dispose
from app.settings import Settings
from scheduler import tasks as t
from scheduler.service import SchedulerLoop, SchedulerTimers
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import BATCH, JSON, dumps, event
from tests.integration.scheduler.conftest import define
from tests.integration.scheduler.test_batch_races import (
    _decided_twice,
    _rows_agree_with_the_log,
)

ROUND_S = 3.0


@pytest.fixture
async def app(database_url: URL) -> AsyncIterator[FastAPI]:
    app = create_app(
        Settings(_env_file=None, db_pool_size=24, run_scheduler=False), database_url=database_url
    )
    yield app
    await dispose(app)


def _projection(app: FastAPI, name: str) -> Any:
    [found] = [p for p in app.state.runner.projections if p.name == name]
    return found


@pytest.mark.parametrize("rebuilds", [False, True])
async def test_dispatch_leases_failures_and_the_task_book_together(
    app: FastAPI, make_key: MakeKey, caplog: pytest.LogCaptureFixture, rebuilds: bool
) -> None:
    caplog.set_level(logging.WARNING)
    statuses: list[tuple[str, int, str]] = []
    stop = asyncio.Event()
    async with (
        asgi_client(app, await make_key("acme", "admin")) as admin,
        asgi_client(app, await make_key("acme", "worker")) as worker,
    ):
        await define(admin, id="plain", types=["job"], kind="k", queue="q",
                     max_retries=100, backoff_base_s=0)  # fmt: skip
        await define(admin, id="keyed", types=["keyed"], kind="k", queue="q",
                     max_retries=100, backoff_base_s=0,
                     debounce={"key": "data.k", "window_s": 30})  # fmt: skip

        async def posting() -> None:
            rng = random.Random(99)  # noqa: S311 - a schedule, not a secret
            while not stop.is_set():
                batch = [
                    event(type="job")
                    if rng.random() < 0.5
                    else event(type="keyed", data={"k": f"k{rng.randrange(4)}"})
                    for _ in range(rng.randrange(1, 6))
                ]
                response = await admin.post("/events", content=dumps(batch), headers=BATCH)
                statuses.append(("/events", response.status_code, response.text[:300]))
                await asyncio.sleep(0.02)

        async def send(path: str, body: dict[str, Any]) -> Any:
            response = await worker.post(path, content=dumps(body), headers=JSON)
            statuses.append((path, response.status_code, response.text[:300]))
            if response.status_code != 200:
                return None
            answer = response.json()
            items = answer.get("tasks", []) if isinstance(answer, dict) else []
            statuses.extend(
                (path + " item", int(item["status"]), str(item)[:300])
                for item in items
                if isinstance(item, dict) and int(item.get("status", 200)) >= 500
            )
            return answer

        def failures(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [
                {"task": one["task"]["id"], "lease": one["lease"], "class": "transient",
                 "message": "boom"}
                for one in batch
            ]  # fmt: skip

        def completions(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [
                {"task": one["task"]["id"], "lease": one["lease"], "events": []} for one in batch
            ]

        async def one_worker(n: int) -> None:
            rng = random.Random(n)  # noqa: S311 - a schedule, not a secret
            while not stop.is_set():
                body = {"worker": f"w{n}", "max_tasks": 8, "lease_s": rng.choice([0.05, 5])}
                got = await send("/queues/q/lease", body)
                batch = got["tasks"] if got else []
                if not batch:
                    await asyncio.sleep(0.01)
                    continue
                first = rng.sample(batch, k=max(1, len(batch) * 2 // 3))
                second = rng.sample(batch, k=max(1, len(batch) * 2 // 3))
                sends = [send("/tasks/fail", {"tasks": failures(first)})]
                if rng.random() < 0.5:
                    sends.append(send("/tasks/complete", {"tasks": completions(second)}))
                else:
                    again = {**body, "lease_s": 5, "complete": completions(second)}
                    sends.append(send("/queues/q/lease", again))
                await asyncio.gather(*sends)

        async def sweeping() -> None:
            state = app.state
            loop = SchedulerLoop(
                state.engine, state.scheduler_controller, SchedulerTimers(), state.decisions
            )
            while not stop.is_set():
                try:
                    await loop.expire_leases()
                except Exception as exc:
                    statuses.append(("sweeper", 0, repr(exc)[:300]))
                await asyncio.sleep(0.01)

        async def stepping(name: str) -> None:
            runner, projection = app.state.runner, _projection(app, name)
            while not stop.is_set():
                try:
                    await runner.step(projection)
                except Exception as exc:
                    statuses.append((name, 0, repr(exc)[:300]))
                await asyncio.sleep(0)

        async def rebuilding() -> None:
            runner, book = app.state.runner, _projection(app, t.TASKS_PROJECTION)
            while rebuilds and not stop.is_set():
                await asyncio.sleep(0.5)
                try:
                    await runner.rebuild(book)
                except Exception as exc:
                    statuses.append(("rebuild", 0, repr(exc)[:300]))

        async def timer() -> None:
            await asyncio.sleep(ROUND_S)
            stop.set()

        await asyncio.gather(
            timer(),
            posting(),
            sweeping(),
            stepping("scheduler-dispatch"),
            stepping(t.TASKS_PROJECTION),
            rebuilding(),
            *(one_worker(n) for n in range(4)),
        )
        await catch_up(app)

    bad = [s for s in statuses if s[1] not in (200, 201, 204)]
    # They really ran.
    assert len(statuses) > 100
    deadlocks = [r.getMessage() for r in caplog.records if "deadlock" in r.getMessage()]
    twice, disagree = await _decided_twice(app), await _rows_agree_with_the_log(app)
    assert not bad, bad[:5]
    assert not deadlocks, deadlocks[:3]
    assert not twice
    assert not disagree, disagree[:5]
