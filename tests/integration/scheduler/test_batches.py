"""Batches and wake-ups: leasing many tasks at once under concurrent leasers, completing
and failing many at once with each task answered on its own, and a long-poll answered as
soon as the dispatcher makes a task, not at its next poll."""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from fastapi import FastAPI
from sqlalchemy import URL

from app.db.engine import libpq_conninfo
from app.main import create_app, dispose
from app.settings import Settings
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import BATCH, JSON, STRUCTURED, dumps, event
from tests.integration.scheduler.conftest import Client, define, post, queued


@pytest.fixture
async def app(database_url: URL) -> AsyncIterator[FastAPI]:
    app = create_app(
        Settings(_env_file=None, db_pool_size=16, run_scheduler=False), database_url=database_url
    )
    yield app
    await dispose(app)


@pytest.fixture
async def clients(app: FastAPI, make_key: MakeKey) -> AsyncIterator[tuple[Client, Client]]:
    """An admin (routes, reads) and a worker of tenant acme."""
    async with (
        asgi_client(app, await make_key("acme", "admin")) as admin,
        asgi_client(app, await make_key("acme", "worker")) as worker,
    ):
        yield admin, worker


async def lease_many(client: Client, max_tasks: int, **body: Any) -> list[dict[str, Any]]:
    response = await client.post(
        "/queues/q/lease",
        content=dumps({"worker": "w1", "max_tasks": max_tasks, **body}),
        headers=JSON,
    )
    if response.status_code == 204:
        return []
    assert response.status_code == 200, response.text
    return list(response.json()["tasks"])


async def routed_jobs(app: FastAPI, admin: Client, count: int) -> list[dict[str, Any]]:
    """``count`` job events posted in one batch, each made a task of queue ``q``."""
    await define(admin, id="r", types=["job"], kind="infer", queue="q")
    jobs = [event(type="job") for _ in range(count)]
    assert (await admin.post("/events", content=dumps(jobs), headers=BATCH)).status_code == 201
    await catch_up(app)
    return jobs


async def test_sixteen_concurrent_batch_leasers_lease_each_task_once(
    app: FastAPI, make_key: MakeKey
) -> None:
    async with asgi_client(app, await make_key("acme", "admin")) as admin:
        jobs = await routed_jobs(app, admin, 300)

        async def leaser(n: int) -> list[dict[str, Any]]:
            got = []
            while leased := await lease_many(admin, 7, worker=f"w{n}"):
                assert len(leased) <= 7
                got.extend(leased)
            return got

        found = await asyncio.gather(*(leaser(n) for n in range(16)))
    every = [leased["task"]["id"] for got in found for leased in got]
    assert len(every) == len(set(every)) == 300
    assert len({leased["lease"] for got in found for leased in got}) == 300  # a lease each
    assert sum(1 for got in found if got) > 1  # they really ran side by side
    triggers = {leased["trigger"]["id"] for got in found for leased in got}
    assert triggers == {job["id"] for job in jobs}


async def test_eight_workers_that_complete_with_their_next_lease_finish_each_task_once(
    app: FastAPI, make_key: MakeKey
) -> None:
    async with asgi_client(app, await make_key("acme", "admin")) as admin:
        await routed_jobs(app, admin, 200)

        async def worker(n: int) -> tuple[list[str], list[int]]:
            leased, statuses = [], []
            batch = await lease_many(admin, 6, worker=f"w{n}")
            while batch:
                leased += [one["task"]["id"] for one in batch]
                done = [
                    {"task": one["task"]["id"], "lease": one["lease"], "events": [
                        event(type="job.done", data={"by": n})
                    ]}
                    for one in batch
                ]  # fmt: skip
                body = {"worker": f"w{n}", "max_tasks": 6, "complete": done}
                response = await admin.post("/queues/q/lease", content=dumps(body), headers=JSON)
                assert response.status_code == 200, response.text
                statuses += [a["status"] for a in response.json()["completed"]]
                batch = response.json()["tasks"]
            return leased, statuses

        found = await asyncio.gather(*(worker(n) for n in range(8)))
        every = [task for leased, _ in found for task in leased]
        assert len(every) == len(set(every)) == 200  # each task leased once
        assert {status for _, statuses in found for status in statuses} == {200}
        assert sum(len(statuses) for _, statuses in found) == 200  # and completed once
        assert sum(1 for leased, _ in found if leased) > 1  # they really ran side by side
        states = (await admin.get("/queues")).json()
        [depth] = [q for q in states["queues"] if q["queue"] == "q"]
        assert depth["ready"] == depth["in_flight"] == 0


async def test_a_batch_completion_answers_each_task_and_one_lost_lease_fails_only_it(
    app: FastAPI, clients: tuple[Client, Client]
) -> None:
    admin, worker = clients
    await queued(app, admin, jobs=4)
    leased = await lease_many(worker, 4)
    assert len(leased) == 4
    done = [
        {
            "task": one["task"]["id"],
            "lease": one["lease"] if n != 1 else "not-the-lease",
            "events": [event(type="job.done", data={"n": n})],
        }
        for n, one in enumerate(leased[:3])
    ]
    response = await worker.post("/tasks/complete", content=dumps({"tasks": done}), headers=JSON)
    assert response.status_code == 200, response.text
    answers = response.json()["tasks"]
    assert [a["status"] for a in answers] == [200, 409, 200]
    assert answers[1]["problem"]["type"] == "/problems/lease-lost"
    assert [a["task"] for a in answers] == [d["task"] for d in done]
    for answer, one in ((answers[0], leased[0]), (answers[2], leased[2])):
        assert answer["trigger"] == one["trigger"]["id"]
        [result] = answer["results"]
        found = (await admin.get(f"/events/{result['id']}")).json()
        assert one["trigger"]["id"] in str(found)  # caused by the task's trigger
    states = [(await admin.get(f"/tasks/{one['task']['id']}")).json() for one in leased]
    assert [s["state"] for s in states] == ["completed", "leased", "completed", "leased"]
    # Sent again (its answer was lost), the batch is answered as before and writes nothing.
    again = await worker.post("/tasks/complete", content=dumps({"tasks": done}), headers=JSON)
    assert [a["status"] for a in again.json()["tasks"]] == [200, 409, 200]
    assert again.json()["tasks"][0]["results"] == answers[0]["results"]

    failures = [
        {"task": leased[1]["task"]["id"], "lease": leased[1]["lease"], "class": "transient",
         "message": "out of memory"},
        {"task": leased[3]["task"]["id"], "lease": "lost", "class": "transient",
         "message": "out of memory"},
    ]  # fmt: skip
    response = await worker.post("/tasks/fail", content=dumps({"tasks": failures}), headers=JSON)
    answers = response.json()["tasks"]
    assert [a["status"] for a in answers] == [200, 409]
    assert answers[0]["result"]["attempts"] == 1
    assert answers[0]["result"]["error"]["class"] == "transient"
    # Sent again, the failures are answered as before and write nothing; a report of
    # another failure under the spent lease is still refused.
    again = await worker.post("/tasks/fail", content=dumps({"tasks": failures}), headers=JSON)
    assert [a["status"] for a in again.json()["tasks"]] == [200, 409]
    assert again.json()["tasks"][0]["result"] == answers[0]["result"]
    history = (await admin.get(f"/tasks/{leased[1]['task']['id']}")).json()["history"]
    assert [h["type"] for h in history].count("causeway.task.retried") == 1
    other = [{**failures[0], "message": "disk full"}]
    refused = await worker.post("/tasks/fail", content=dumps({"tasks": other}), headers=JSON)
    assert [a["status"] for a in refused.json()["tasks"]] == [409]


async def test_a_long_poll_answers_within_100_ms_of_the_task_being_made(
    app: FastAPI, make_key: MakeKey
) -> None:
    app.state.wakeups.start()
    running = asyncio.create_task(app.state.runner.run())
    try:
        async with (
            asgi_client(app, await make_key("acme", "admin")) as admin,
            asgi_client(app, await make_key("acme", "worker")) as worker,
        ):
            await define(admin, id="r", types=["job"], kind="infer", queue="q")
            async with asyncio.timeout(10):
                while not app.state.wakeups.listening:
                    await asyncio.sleep(0.05)
            latencies = []
            for _ in range(50):
                waiting = asyncio.create_task(lease_many(worker, 1, wait_s=10))
                await asyncio.sleep(0.02)  # the lease is waiting
                posted = await admin.post(
                    "/events", content=dumps(event(type="job")), headers=STRUCTURED
                )
                assert posted.status_code == 201
                [leased] = await waiting
                answered = datetime.now(UTC)
                made = datetime.fromisoformat(leased["task"]["created_at"])
                latencies.append((answered - made).total_seconds())
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert statistics.median(latencies) < 0.1, sorted(latencies)


async def test_a_task_named_twice_in_one_batch_completion_is_refused_whole(
    app: FastAPI, clients: tuple[Client, Client]
) -> None:
    # Task rows of a batch are written in one statement, which can write a row once.
    admin, worker = clients
    await queued(app, admin, jobs=2)
    first, second = await lease_many(worker, 2)
    done = [
        {"task": one["task"]["id"], "lease": one["lease"], "events": []}
        for one in (first, second, first)
    ]
    response = await worker.post("/tasks/complete", content=dumps({"tasks": done}), headers=JSON)
    assert response.status_code == 400, response.text
    assert response.json()["detail"] == "tasks: a task is named twice"
    for one in (first, second):
        assert (await admin.get(f"/tasks/{one['task']['id']}")).json()["state"] == "leased"


async def test_a_lease_request_completes_a_batch_and_leases_the_next_in_one_transaction(
    app: FastAPI, clients: tuple[Client, Client]
) -> None:
    admin, worker = clients
    await queued(app, admin, jobs=5)
    first = await lease_many(worker, 3)
    done = [
        {
            "task": one["task"]["id"],
            "lease": one["lease"] if n != 1 else "not-the-lease",
            "events": [event(type="job.done", data={"n": n})],
        }
        for n, one in enumerate(first)
    ]
    response = await worker.post(
        "/queues/q/lease",
        content=dumps({"worker": "w1", "max_tasks": 3, "complete": done}),
        headers=JSON,
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    # Each finished task is answered as POST /tasks/complete answers it: one lost lease
    # fails only its task.
    assert [a["status"] for a in answer["completed"]] == [200, 409, 200]
    assert answer["completed"][1]["problem"]["type"] == "/problems/lease-lost"
    assert answer["completed"][0]["trigger"] == first[0]["trigger"]["id"]
    [result] = answer["completed"][2]["results"]
    assert first[2]["trigger"]["id"] in str((await admin.get(f"/events/{result['id']}")).json())
    # The next batch: the two tasks left, each under a lease of its own.
    second = answer["tasks"]
    assert len(second) == 2
    assert {one["task"]["id"] for one in second}.isdisjoint(d["task"] for d in done)
    highest = max(a["results"][0]["position"] for a in answer["completed"] if a["status"] == 200)
    assert int(response.headers["Causeway-Position"]) > highest  # the leases came after
    states = [(await admin.get(f"/tasks/{one['task']['id']}")).json() for one in first]
    assert [s["state"] for s in states] == ["completed", "leased", "completed"]
    # The leases were granted after the completions were decided, and say so.
    finished = [s["history"][-1]["data"]["at"] for s in states if s["state"] == "completed"]
    leased = [
        (await admin.get(f"/tasks/{one['task']['id']}")).json()["history"][-1] for one in second
    ]
    assert {entry["type"] for entry in leased} == {"causeway.task.leased"}
    at = datetime.fromisoformat
    assert min(at(e["data"]["at"]) for e in leased) >= max(map(at, finished))

    # Nothing left to lease: the completions are still answered (200, not 204) and stored.
    rest = [{"task": one["task"]["id"], "lease": one["lease"], "events": []} for one in second]
    response = await worker.post(
        "/queues/q/lease",
        content=dumps({"worker": "w1", "max_tasks": 3, "complete": rest}),
        headers=JSON,
    )
    assert response.status_code == 200, response.text
    assert response.json()["tasks"] == []
    assert [a["status"] for a in response.json()["completed"]] == [200, 200]
    for one in second:
        assert (await admin.get(f"/tasks/{one['task']['id']}")).json()["state"] == "completed"


async def test_a_lease_request_reads_its_results_as_post_events_does(
    app: FastAPI, clients: tuple[Client, Client]
) -> None:
    admin, worker = clients
    await queued(app, admin, jobs=2)
    first, second = await lease_many(worker, 2)

    async def lease_completing(done: list[dict[str, Any]]) -> Any:
        body = dumps({"worker": "w1", "max_tasks": 1, "complete": done})
        return await worker.post("/queues/q/lease", content=body, headers=JSON)

    # A result that is no CloudEvent fails its task alone.
    refused = {"task": first["task"]["id"], "lease": first["lease"], "events": [{"id": "x"}]}
    fine = {"task": second["task"]["id"], "lease": second["lease"], "events": []}
    response = await lease_completing([refused, fine])
    assert response.status_code == 200, response.text
    assert [a["status"] for a in response.json()["completed"]] == [400, 200]
    assert (await admin.get(f"/tasks/{first['task']['id']}")).json()["state"] == "leased"
    # What POST /events refuses as JSON (Infinity), and a task named twice, refuse the
    # whole request, and nothing is stored.
    infinite = {**refused, "events": [event(type="job.done")]}
    body = dumps({"worker": "w1", "max_tasks": 1, "complete": [infinite]})
    body = body.replace(b'"specversion"', b'"n": Infinity, "specversion"', 1)
    response = await worker.post("/queues/q/lease", content=body, headers=JSON)
    assert response.status_code == 400, response.text
    assert response.json()["type"] == "/problems/invalid-json"
    again = {**refused, "events": []}
    response = await lease_completing([again, again])
    assert response.status_code == 400, response.text
    assert response.json()["detail"] == "complete: a task is named twice"
    assert (await admin.get(f"/tasks/{first['task']['id']}")).json()["state"] == "leased"


async def test_a_lease_request_stores_its_completions_before_its_long_poll_waits(
    app: FastAPI, clients: tuple[Client, Client]
) -> None:
    admin, worker = clients
    await queued(app, admin, jobs=1)
    [one] = await lease_many(worker, 1)
    done = [{"task": one["task"]["id"], "lease": one["lease"], "events": []}]
    body = {"worker": "w1", "complete": done, "wait_s": 3.0}  # no max_tasks: same answer
    waiting = asyncio.create_task(worker.post("/queues/q/lease", content=dumps(body), headers=JSON))
    state = None
    for _ in range(40):  # the queue is empty: the request waits 3 s for a task
        await asyncio.sleep(0.05)
        state = (await admin.get(f"/tasks/{one['task']['id']}")).json()["state"]
        if state == "completed":
            break
    assert state == "completed"
    assert not waiting.done()  # stored while the request still waits
    response = await waiting
    assert response.status_code == 200, response.text
    assert response.json()["tasks"] == []
    assert [a["status"] for a in response.json()["completed"]] == [200]


async def test_a_result_the_log_refuses_fails_its_task_alone_and_the_lease_goes_on(
    app: FastAPI, clients: tuple[Client, Client]
) -> None:
    """The completions and the leases of one request are appended as one group: when
    the log refuses it (a result under an id it holds with other content), each part
    is done on its own, as POST /tasks/complete and a lease alone would do it."""
    admin, worker = clients
    await queued(app, admin, jobs=4)
    taken = await post(admin, type="photo")
    first, second = await lease_many(worker, 2)
    clash = event(type="job.done", id=taken["id"])  # another event under a stored id
    done = [
        {"task": first["task"]["id"], "lease": first["lease"], "events": [clash]},
        {"task": second["task"]["id"], "lease": second["lease"], "events": []},
    ]
    body = dumps({"worker": "w1", "max_tasks": 2, "complete": done})
    response = await worker.post("/queues/q/lease", content=body, headers=JSON)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert [a["status"] for a in answer["completed"]] == [409, 200]
    assert answer["completed"][0]["problem"]["type"] == "/problems/id-conflict"
    assert len(answer["tasks"]) == 2  # the two tasks left, leased all the same
    assert {one["task"]["id"] for one in answer["tasks"]}.isdisjoint(d["task"] for d in done)
    states = [(await admin.get(f"/tasks/{d['task']}")).json()["state"] for d in done]
    assert states == ["leased", "completed"]
    assert (await admin.get(f"/events/{taken['id']}")).json()["type"] == "photo"


async def test_a_lease_request_that_completes_leases_by_priority_then_age(
    app: FastAPI, clients: tuple[Client, Client]
) -> None:
    admin, worker = clients
    for name, priority in (("low", 2), ("high", 7)):
        spec = {"id": name, "types": [name], "kind": "k", "queue": "q", "priority": priority}
        await define(admin, **spec)
    posted = [await post(admin, type=kind) for kind in ("low", "high", "low", "high", "low")]
    await catch_up(app)
    [first] = await lease_many(worker, 1)
    assert first["trigger"]["id"] == posted[1]["id"]  # the oldest of the highest
    done = [{"task": first["task"]["id"], "lease": first["lease"], "events": []}]
    body = dumps({"worker": "w1", "max_tasks": 3, "complete": done})
    response = await worker.post("/queues/q/lease", content=body, headers=JSON)
    assert response.status_code == 200, response.text
    leased = [one["trigger"]["id"] for one in response.json()["tasks"]]
    assert leased == [posted[3]["id"], posted[0]["id"], posted[2]["id"]]


async def _two_leased(app: FastAPI, admin: Client, worker: Client) -> list[dict[str, Any]]:
    await queued(app, admin, jobs=2)
    body = dumps({"worker": "w1", "max_tasks": 2})
    leased = await worker.post("/queues/q/lease", content=body, headers=JSON)
    assert leased.status_code == 200, leased.text
    tasks: list[dict[str, Any]] = leased.json()["tasks"]
    return tasks


@pytest.mark.parametrize("entry", ["tasks/complete", "lease"])
async def test_a_result_that_is_no_object_fails_its_task_alone(
    app: FastAPI, admin: Client, worker: Client, entry: str
) -> None:
    """``null`` or ``1`` as a result is refused in its task's answer, as a result the store
    refuses is: the batch's other completions are stored."""
    good, bad = await _two_leased(app, admin, worker)
    items = [
        {"task": good["task"]["id"], "lease": good["lease"], "events": [event(type="done")]},
        {"task": bad["task"]["id"], "lease": bad["lease"], "events": [None, 1]},
    ]
    answers = await _completed(worker, entry, items)
    assert [a["status"] for a in answers] == [200, 400]


@pytest.mark.parametrize("entry", ["tasks/complete", "lease"])
async def test_a_batchs_results_are_appended_in_the_workers_order(
    app: FastAPI, admin: Client, worker: Client, entry: str
) -> None:
    """The second item's result is caused by the first's, as ``POST /events`` takes them
    in one batch. They were appended in task-id order: refused as an unknown cause
    whenever the first task's id sorted after the second's (ids are hashes: half the
    time), in an answer that said the cause was stored."""
    # The first item's task id sorts after the second's.
    second, first = sorted(await _two_leased(app, admin, worker), key=lambda x: x["task"]["id"])
    made = event(type="done")
    uses = event(type="done", causationid=made["id"])
    items = [
        {"task": first["task"]["id"], "lease": first["lease"], "events": [made]},
        {"task": second["task"]["id"], "lease": second["lease"], "events": [uses]},
    ]
    answers = await _completed(worker, entry, items)
    assert [a["status"] for a in answers] == [200, 200], answers
    [one], [two] = (a["results"] for a in answers)
    assert one["position"] < two["position"]


async def _completed(worker: Client, entry: str, items: list[dict[str, Any]]) -> list[Any]:
    """Each item's answer, completed by ``POST /tasks/complete`` or by a lease request."""
    if entry == "lease":
        body, path, field = {"worker": "w1", "complete": items}, "/queues/q/lease", "completed"
    else:
        body, path, field = {"tasks": items}, "/tasks/complete", "tasks"
    answer = await worker.post(path, content=dumps(body), headers=JSON)
    assert answer.status_code == 200, answer.text
    answers: list[Any] = answer.json()[field]
    return answers


async def _blocked_by(
    watch: psycopg.AsyncConnection[Any], holder: psycopg.AsyncConnection[Any]
) -> None:
    """Until a backend waits for a lock that ``holder``'s transaction holds."""
    deadline = asyncio.get_running_loop().time() + 10
    while asyncio.get_running_loop().time() < deadline:
        found = await watch.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
            (holder.info.backend_pid,),
        )
        if (await found.fetchone()) != (0,):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("nothing came to wait for the lock")


async def test_a_lease_request_that_waited_for_its_completions_locks_no_task_leased_meanwhile(
    app: FastAPI, clients: tuple[Client, Client], database_url: URL
) -> None:
    """A lease request's completions may wait for their rows; its scan for the next tasks
    must not run on the snapshot from before that wait, or it locks the tasks other
    workers leased meanwhile (PostgreSQL locks a row before it finds the row's new version
    no longer ready), and holds them until its decisions are appended: those workers'
    completions would wait for it."""
    admin, worker = clients
    await queued(app, admin, jobs=3)
    [mine] = await lease_many(worker, 1)
    conninfo = libpq_conninfo(database_url)
    async with (
        await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as watch,
        await psycopg.AsyncConnection.connect(conninfo) as row_holder,
        await psycopg.AsyncConnection.connect(conninfo) as head_holder,
    ):
        await row_holder.execute(
            "SELECT 1 FROM tasks WHERE id = %s FOR UPDATE", (mine["task"]["id"],)
        )
        done = [{"task": mine["task"]["id"], "lease": mine["lease"], "events": []}]
        body = dumps({"worker": "w1", "max_tasks": 1, "complete": done})
        request = asyncio.ensure_future(worker.post("/queues/q/lease", content=body, headers=JSON))
        await _blocked_by(watch, row_holder)  # its completion waits for the row
        [theirs] = await lease_many(worker, 1, worker="w2")  # leased and committed meanwhile
        await head_holder.execute("SELECT 1 FROM log_head FOR UPDATE")
        await row_holder.commit()
        await _blocked_by(watch, head_holder)  # its decisions wait at the head
        # The other worker's task is not held by the waiting request.
        async with watch.transaction():
            await watch.execute(
                "SELECT 1 FROM tasks WHERE id = %s FOR UPDATE NOWAIT", (theirs["task"]["id"],)
            )
        await head_holder.commit()
        response = await request
    assert response.status_code == 200, response.text
    assert [a["status"] for a in response.json()["completed"]] == [200]
    [leased] = response.json()["tasks"]
    assert leased["task"]["id"] not in (mine["task"]["id"], theirs["task"]["id"])
