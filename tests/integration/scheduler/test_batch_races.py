"""Batch failures, completions and complete-and-lease over overlapping sets of tasks, in
different orders, while the sweeper expires leases and the task book catches up: no
request fails (no deadlock, 500 or 503), no task is decided twice, and every task row
agrees with its decisions in the log."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import URL, text

from app.main import create_app, dispose
from app.settings import Settings
from scheduler import tasks as t
from scheduler.queue import TaskQueue
from scheduler.rows import tasks as task_rows
from scheduler.service import SchedulerLoop, SchedulerTimers
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import BATCH, JSON, dumps, event
from tests.integration.scheduler.conftest import define

# Long enough to pass every path a hundred times or more; the deadlock it was written for
# showed in 2 of 8 rounds of 12 s (the test below forces that interleaving every time).
ROUND_S = 2.5


@pytest.fixture
async def app(database_url: URL) -> AsyncIterator[FastAPI]:
    app = create_app(
        Settings(_env_file=None, db_pool_size=24, run_scheduler=False), database_url=database_url
    )
    yield app
    await dispose(app)


def _task_book(app: FastAPI) -> Any:
    [book] = [p for p in app.state.runner.projections if p.name == t.TASKS_PROJECTION]
    return book


async def _rows_agree_with_the_log(app: FastAPI) -> list[str]:
    """Each task whose row is not the fold of its decisions in the log, and why."""
    wrong = []
    async with app.state.engine.connect() as conn:
        found = await conn.execute(
            text(
                "SELECT e.data->>'task_id', e.type, e.data, e.position FROM events e"
                " WHERE e.tenant = 'acme' AND e.stream LIKE 'causeway:task:%'"
                " ORDER BY e.position"
            )
        )
        folded: dict[str, t.TaskState] = {}
        for task_id, event_type, data, position in found.all():
            folded[task_id] = t.fold(folded.get(task_id), event_type, data, position)
        rows = await conn.execute(text("SELECT * FROM tasks WHERE tenant = 'acme'"))
        stored = {row[1]: t.TaskState(*row) for row in rows.all()}
    for task_id, state in folded.items():
        if stored.get(task_id) != state:
            row = stored.get(task_id)
            wrong.append(
                f"{task_id}: log {state.state}@{state.position}, "
                f"row {row.state if row else None}@{row.position if row else None}"
            )
    return wrong


async def _decided_twice(app: FastAPI) -> list[str]:
    """Each lease that was ended by more than one decision (completed, retried, dead-lettered,
    superseded under it), and each task completed more than once."""
    async with app.state.engine.connect() as conn:
        found = await conn.execute(
            text(
                "SELECT e.data->>'task_id', e.type, e.data->>'lease' FROM events e"
                " WHERE e.tenant = 'acme' AND e.stream LIKE 'causeway:task:%'"
                " ORDER BY e.position"
            )
        )
        ended: dict[tuple[str, str], int] = {}
        completed: dict[str, int] = {}
        for task_id, event_type, lease in found.all():
            if event_type == t.COMPLETED:
                completed[task_id] = completed.get(task_id, 0) + 1
            if lease is not None and event_type in (t.COMPLETED, t.RETRIED, t.DEAD_LETTERED):
                ended[(task_id, lease)] = ended.get((task_id, lease), 0) + 1
    return [f"{k}: {n}" for k, n in ended.items() if n > 1] + [
        f"{k} completed {n} times" for k, n in completed.items() if n > 1
    ]


async def test_overlapping_batch_failures_and_completions_never_deadlock(
    app: FastAPI, make_key: MakeKey, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    statuses: list[tuple[str, int, str]] = []
    stop = asyncio.Event()
    async with (
        asgi_client(app, await make_key("acme", "admin")) as admin,
        asgi_client(app, await make_key("acme", "worker")) as worker,
    ):
        await define(admin, id="r", types=["job"], kind="k", queue="q",
                     max_retries=100, backoff_base_s=0)  # fmt: skip
        jobs = [event(type="job") for _ in range(60)]
        assert (await admin.post("/events", content=dumps(jobs), headers=BATCH)).status_code == 201
        await catch_up(app)

        async def send(path: str, body: dict[str, Any]) -> Any:
            response = await worker.post(path, content=dumps(body), headers=JSON)
            statuses.append((path, response.status_code, response.text[:300]))
            return response.json() if response.status_code == 200 else None

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
                lease_s = rng.choice([0.05, 0.2, 5])
                body = {"worker": f"w{n}", "max_tasks": 8, "lease_s": lease_s}
                got = await send("/queues/q/lease", body)
                batch = got["tasks"] if got else []
                if not batch:
                    await asyncio.sleep(0.01)
                    continue
                # Overlapping halves, each shuffled: failed and completed side by side.
                first = rng.sample(batch, k=max(1, len(batch) * 2 // 3))
                second = rng.sample(batch, k=max(1, len(batch) * 2 // 3))
                sends = [send("/tasks/fail", {"tasks": failures(first)})]
                if rng.random() < 0.5:
                    sends.append(send("/tasks/fail", {"tasks": failures(second)}))
                elif rng.random() < 0.5:
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
                await loop.expire_leases()
                await asyncio.sleep(0.01)

        async def booking() -> None:
            runner, book = app.state.runner, _task_book(app)
            while not stop.is_set():
                try:
                    await runner.step(book)
                except Exception as exc:  # a deadlock here is a finding too
                    statuses.append(("task book", 0, repr(exc)[:300]))
                await asyncio.sleep(0)

        async def timer() -> None:
            await asyncio.sleep(ROUND_S)
            stop.set()

        await asyncio.gather(timer(), sweeping(), booking(), *(one_worker(n) for n in range(6)))
        await catch_up(app)

    bad = [s for s in statuses if s[1] not in (200, 204)]
    assert len(statuses) > 100  # they really ran
    deadlocks = [r.getMessage() for r in caplog.records if "deadlock" in r.getMessage()]
    twice, disagree = await _decided_twice(app), await _rows_agree_with_the_log(app)
    assert not bad, bad[:5]
    assert not deadlocks, deadlocks[:3]
    assert not twice
    assert not disagree


async def test_a_batch_failure_and_the_task_book_catching_up_do_not_deadlock(
    app: FastAPI, make_key: MakeKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interleaving the stress test above finds now and then, made certain: the task
    book folds a decision of task B (another command's, just committed) and then one of
    task A, which a ``POST /tasks/fail`` of [A, B] holds; that request then asks for B.
    Each waits for the other: PostgreSQL ends the request with ``deadlock detected``, a
    503 that says nothing was written, though A's failure was appended."""
    async with (
        asgi_client(app, await make_key("acme", "admin")) as admin,
        asgi_client(app, await make_key("acme", "worker")) as worker,
    ):
        await define(admin, id="r", types=["job"], kind="k", queue="q")
        jobs = [event(type="job") for _ in range(2)]
        assert (await admin.post("/events", content=dumps(jobs), headers=BATCH)).status_code == 201
        await catch_up(app)
        body = {"worker": "w1", "max_tasks": 2, "lease_s": 60}
        response = await worker.post("/queues/q/lease", content=dumps(body), headers=JSON)
        leased = sorted(response.json()["tasks"], key=lambda one: one["task"]["id"])
        a, b = leased  # A before B in id order: the order rows are locked in
        a_id, b_id = a["task"]["id"], b["task"]["id"]

        request_at_b, go_request = asyncio.Event(), asyncio.Event()
        book_at_a, go_book = asyncio.Event(), asyncio.Event()
        b_locks = 0
        fetch_task, fetch_position = task_rows.fetch_task, task_rows.fetch_position

        async def gated_fetch_task(conn: Any, tenant: str, task_id: str, **kw: Any) -> Any:
            nonlocal b_locks
            if task_id == b_id and kw.get("lock"):
                b_locks += 1
                if b_locks == 2:  # the request, having failed A, about to lock B
                    request_at_b.set()
                    await go_request.wait()
            return await fetch_task(conn, tenant, task_id, **kw)

        async def gated_fetch_position(conn: Any, tenant: str, task_id: str) -> Any:
            if task_id == a_id and not book_at_a.is_set():
                book_at_a.set()  # the task book, B folded, about to fold A
                await go_book.wait()
            return await fetch_position(conn, tenant, task_id)

        monkeypatch.setattr(task_rows, "fetch_task", gated_fetch_task)
        monkeypatch.setattr(task_rows, "fetch_position", gated_fetch_position)

        b_failed, commit_b = asyncio.Event(), asyncio.Event()

        async def another_command_fails_b() -> None:
            async with app.state.engine.begin() as conn:
                queue = TaskQueue(conn, appender=app.state.decisions)
                await queue.fail("acme", b_id, b["lease"], "transient", "boom")
                b_failed.set()
                await commit_b.wait()

        failures = [
            {"task": one["task"]["id"], "lease": one["lease"], "class": "transient",
             "message": "boom"}
            for one in (a, b)
        ]  # fmt: skip
        command = asyncio.create_task(another_command_fails_b())
        await b_failed.wait()  # B's decision is in the log, its row not yet committed
        request = asyncio.create_task(
            worker.post("/tasks/fail", content=dumps({"tasks": failures}), headers=JSON)
        )
        await asyncio.wait_for(request_at_b.wait(), 10)  # A failed, its row held
        runner, book = app.state.runner, _task_book(app)
        stepping = asyncio.create_task(runner.step(book))
        await asyncio.sleep(0.3)  # the task book waits for B's row
        commit_b.set()
        await command
        with contextlib.suppress(TimeoutError):  # a task book that locks A first waits
            await asyncio.wait_for(book_at_a.wait(), 1)
        go_request.set()
        await asyncio.sleep(0.3)  # the request waits for B's row, which the task book holds
        go_book.set()
        answer = await asyncio.wait_for(request, 30)
        await asyncio.wait_for(stepping, 30)

        assert answer.status_code == 200, answer.text
        assert [one["status"] for one in answer.json()["tasks"]] == [200, 200]
        await catch_up(app)
        assert not await _rows_agree_with_the_log(app)
