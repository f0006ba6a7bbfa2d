"""The task table as the fold of the log, on a real PostgreSQL: rebuilt equal to
the live one, caught up after a lost write, and pruned after the retention period."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import orjson
from fastapi import FastAPI
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.tables import tasks
from app.projections.checkpoints import read_events, read_head
from app.store.log import EventLog
from scheduler import tasks as t
from scheduler.rows.tasks import fetch_task
from scheduler.service import SchedulerLoop, SchedulerTimers
from tests.integration.conftest import catch_up
from tests.integration.events import JSON, dumps, event
from tests.integration.scheduler.conftest import (
    NOW,
    Client,
    define,
    events_of_type,
    fail,
    lease,
    post,
    queued,
)


class TestQueueState:
    async def test_the_queue_rebuilt_from_the_log_equals_the_live_one(
        self, app: FastAPI, admin: Client, worker: Client, engine: AsyncEngine
    ) -> None:
        await define(admin, id="r", types=["job"], kind="k", queue="q", max_retries=1)
        for n in range(6):
            await post(admin, type="job", data={"n": n})
        await catch_up(app)
        first = await lease(worker, "q")
        second = await lease(worker, "q")
        third = await lease(worker, "q")
        assert first
        assert second
        assert third
        await worker.post(
            f"/tasks/{first['task']['id']}/complete",
            content=dumps({"lease": first["lease"], "events": [event(type="done")]}),
            headers=JSON,
        )
        await fail(worker, second, "transient")

        async def snapshot() -> list[Any]:
            async with engine.connect() as conn:
                return [tuple(r) for r in await conn.execute(select(tasks).order_by(tasks.c.id))]

        live = await snapshot()
        rebuilt = await app.state.runner.rebuild(app.state.runner.projection("scheduler-tasks"))
        assert rebuilt > 0
        assert await snapshot() == live

    async def test_a_completion_that_waited_for_a_rebuild_finds_the_rebuilt_row(
        self, app: FastAPI, admin: Client, worker: Client, engine: AsyncEngine
    ) -> None:
        # A rebuild deletes every row and inserts it again, in one transaction. A command
        # that waited for the row's lock used to find it gone: a 404 for a held lease.
        await queued(app, admin)
        leased = await lease(worker, "q")
        assert leased
        task_id = leased["task"]["id"]
        async with engine.connect() as rebuild:
            await rebuild.execute(text("BEGIN"))
            await rebuild.execute(
                text(
                    "WITH gone AS (DELETE FROM tasks WHERE id = :id RETURNING *) "
                    "INSERT INTO tasks SELECT * FROM gone"
                ),
                {"id": task_id},
            )
            completing = asyncio.create_task(
                worker.post(
                    f"/tasks/{task_id}/complete",
                    content=dumps({"lease": leased["lease"], "events": [event(type="done")]}),
                    headers=JSON,
                )
            )
            await asyncio.sleep(0.5)  # waiting for the row's lock
            assert not completing.done()
            await rebuild.execute(text("COMMIT"))
        response = await completing
        assert response.status_code == 200, response.text
        assert response.json()["state"] == "completed"

    async def test_finished_tasks_rows_go_after_the_retention_their_decisions_stay(
        self, app: FastAPI, admin: Client, worker: Client, engine: AsyncEngine
    ) -> None:
        await queued(app, admin, jobs=3, max_retries=0)
        done, dead, recent = [await lease(worker, "q") for _ in range(3)]
        assert done
        assert dead
        assert recent
        for leased in (done, recent):
            response = await worker.post(
                f"/tasks/{leased['task']['id']}/complete",
                content=dumps({"lease": leased["lease"], "events": []}),
                headers=JSON,
            )
            assert response.status_code == 200, response.text
        await fail(worker, dead, "data_invalid")  # dead-lettered at once
        async with engine.begin() as conn:  # two of them finished 8 days ago
            await conn.execute(
                tasks.update()
                .where(tasks.c.id.in_([done["task"]["id"], dead["task"]["id"]]))
                .values(finished_at=func.now() - timedelta(days=8))
            )
        week = SchedulerTimers(task_retention_s=7 * 86_400)
        state = app.state
        sweeper = SchedulerLoop(state.engine, state.scheduler_controller, week, state.decisions)
        assert await sweeper.prune_finished() == 0  # the task rows' projection is behind
        await catch_up(app)
        assert await sweeper.prune_finished() == 1
        gone = await admin.get(f"/tasks/{done['task']['id']}")
        assert gone.status_code == 404
        assert (await admin.get(f"/tasks/{dead['task']['id']}")).json()["state"] == "dead"
        discarded = await admin.post(  # finished now, 8 days after it died: kept a week more
            f"/dead-letters/{dead['task']['id']}/discard",
            content=dumps({"reason": "r"}),
            headers=JSON,
        )
        assert discarded.status_code == 200, discarded.text
        await catch_up(app)
        assert await sweeper.prune_finished() == 0
        assert (await admin.get(f"/tasks/{recent['task']['id']}")).json()["state"] == "completed"
        stream = f"causeway:task:{done['task']['id']}"
        history = (await admin.get("/replay", params={"stream": stream})).text.splitlines()
        assert orjson.loads(history[-1])["type"] == "causeway.task.completed"
        # A dispatcher replayed from the start finds the task made, in the log, not again.
        runner = app.state.runner
        await runner.rebuild(runner.projection("scheduler-dispatch"))
        assert len(await events_of_type(admin, "causeway.task.created")) == 3
        assert (await admin.get(f"/tasks/{done['task']['id']}")).status_code == 404
        forever = SchedulerLoop(
            state.engine, state.scheduler_controller, SchedulerTimers(), state.decisions
        )
        assert await forever.prune_finished() == 0

    async def test_a_row_whose_write_was_lost_catches_up_from_the_log(
        self, app: FastAPI, admin: Client, worker: Client, engine: AsyncEngine
    ) -> None:
        await queued(app, admin)
        async with engine.begin() as conn:
            [row] = (await conn.execute(select(tasks.c.id))).all()
            state = await fetch_task(conn, "acme", row.id)
            assert state is not None
            leased = {"lease": "l1", "worker": "gone", "attempt": 1, "expires_at": NOW}
            # A leased decision appended, its row never written: the process died between.
            await EventLog(conn).append(
                "acme", [t.decision(state, t.LEASED, leased, at=state.created_at)]
            )
        # The stale row cannot hand the task out again: its decision conflicts on the
        # task's stream, so the lease moves on and finds nothing else.
        assert await lease(worker, "q", worker="w2") is None
        await catch_up(app)  # the task table follows the log
        task = (await admin.get(f"/tasks/{row.id}")).json()
        assert (task["state"], task["worker"], task["attempts"]) == ("leased", "gone", 1)

    async def test_the_task_book_reads_only_the_decisions_a_row_lacks(
        self, app: FastAPI, admin: Client, worker: Client, engine: AsyncEngine
    ) -> None:
        # The command that decides writes its row: reading every decision back to find
        # that out was most of the task book's work under lease + complete.
        await queued(app, admin, jobs=2)
        first, second = await lease(worker, "q"), await lease(worker, "q")
        assert first
        assert second
        book = app.state.runner.projection("scheduler-tasks")
        async with engine.begin() as conn:
            head = await read_head(conn)
            assert await read_events(conn, book, 0, head, 100) == []
            # The first's row loses its lease (its write was lost, say): that one is read.
            await conn.execute(
                tasks.update().where(tasks.c.id == first["task"]["id"]).values(position=0)
            )
            lacked = await read_events(conn, book, 0, head, 100)
            assert [e.record.data["task_id"] for e in lacked] == [first["task"]["id"]] * 2
            assert [e.record.type for e in lacked] == [t.CREATED, t.LEASED]
            await conn.rollback()
        await catch_up(app)
        status = await app.state.runner.status(book)
        assert (status.checkpoint, status.lag_events) == (head, 0)  # passed, not read
