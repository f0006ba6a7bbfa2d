"""The worker library (``ingest.worker``) against a real ``causeway serve``, as the bench
runs it: workers lease and complete in batches, a failed attempt is retried, every task
completes once, a long task keeps its lease by heartbeats, and the chain verifies after.
``stop()`` ends a run after the batch at hand (still heartbeated), a worker runs again
after, and a handler's error fails its task whatever its text, never the worker's loop."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
from sqlalchemy import URL

from app.db.engine import create_engine
from app.store.verify import verify_chain
from ingest.client import Lease
from ingest.worker import TaskFailed, Worker
from tests.integration.events import BATCH, JSON, event
from tests.integration.process import create_key, environment, serving

TASKS = 60


def test_workers_in_batches_complete_every_task_once_and_the_chain_verifies(
    database_url: URL, tmp_path: Path
) -> None:
    url = database_url.render_as_string(hide_password=False)
    env = environment(
        CAUSEWAY_DATABASE_URL=url,
        CAUSEWAY_DATA_DIR=str(tmp_path),
    )
    admin = worker_key = create_key(env, "acme", "admin,worker")
    with serving(env) as base:
        auth = {"Authorization": f"Bearer {admin}"}
        _queue_jobs(base, auth, TASKS, max_retries=2, backoff_base_s=0.05)
        ran: list[tuple[int, int]] = []
        lock = threading.Lock()

        def handler(lease: Lease) -> list[dict[str, Any]]:
            n, attempt = lease.trigger["data"]["n"], lease.task["attempts"]
            with lock:
                ran.append((n, attempt))
            if n % 10 == 3 and attempt == 1:
                raise TaskFailed("transient", "warming up")
            if n == 0:
                time.sleep(5.0)  # longer than its lease: heartbeats keep it
            return [event(type="job.done", data={"n": n})]

        workers = [
            Worker(base, worker_key, queue="jobs", name=f"w{k}", handler=handler, batch=10,
                   wait_s=2.0, lease_s=4.0)
            for k in range(3)
        ]  # fmt: skip
        threads = [
            threading.Thread(target=w.run, kwargs={"until_idle": True}, daemon=True)
            for w in workers
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        for w in workers:
            w.close()
        assert sum(w.stats.completed for w in workers) == TASKS
        assert sum(w.stats.failed for w in workers) == TASKS // 10
        assert sum(w.stats.lost for w in workers) == 0
        assert sorted(n for n, _ in ran if n % 10 != 3) == [n for n in range(TASKS) if n % 10 != 3]
        queue = httpx2.get(f"{base}/queues", headers=auth).json()["queues"][0]
        assert (queue["ready"], queue["in_flight"], queue["dead_letters"]) == (0, 0, 0)
        done = httpx2.get(f"{base}/replay", params={"types": "job.done"}, headers=auth)
        assert len(done.text.splitlines()) == TASKS
    assert asyncio.run(_chain_verifies(database_url))


def test_results_past_the_lease_requests_cap_are_completed_on_their_own(
    database_url: URL, tmp_path: Path
) -> None:
    # A worker completes a batch with the request that leases the next, whose body is
    # capped as every lease request's (CAUSEWAY_MAX_JSON_BODY_BYTES); larger results go
    # by POST /tasks/complete (CAUSEWAY_MAX_REQUEST_BYTES) after the 413.
    url = database_url.render_as_string(hide_password=False)
    env = environment(
        CAUSEWAY_DATABASE_URL=url,
        CAUSEWAY_DATA_DIR=str(tmp_path),
        CAUSEWAY_MAX_JSON_BODY_BYTES="1024",
    )
    admin = worker_key = create_key(env, "acme", "admin,worker")
    with serving(env) as base:
        auth = {"Authorization": f"Bearer {admin}"}
        _queue_jobs(base, auth, 4)

        def handler(lease: Lease) -> list[dict[str, Any]]:
            return [
                event(type="job.done", data={"n": lease.trigger["data"]["n"], "pad": "x" * 2000})
            ]

        with Worker(base, worker_key, queue="jobs", name="w", handler=handler, batch=2,
                    wait_s=0.5) as worker:  # fmt: skip
            stats = worker.run(until_idle=True)
        assert (stats.leased, stats.completed, stats.lost) == (4, 4, 0)
        done = httpx2.get(f"{base}/replay", params={"types": "job.done"}, headers=auth)
        assert sorted(orjson.loads(line)["data"]["n"] for line in done.text.splitlines()) == [
            0, 1, 2, 3
        ]  # fmt: skip


def test_stop_keeps_the_batch_at_hand_leased_and_the_worker_runs_again(
    database_url: URL, tmp_path: Path
) -> None:
    url = database_url.render_as_string(hide_password=False)
    env = environment(CAUSEWAY_DATABASE_URL=url, CAUSEWAY_DATA_DIR=str(tmp_path))
    key = create_key(env, "acme", "admin,worker")
    with serving(env) as base:
        auth = {"Authorization": f"Bearer {key}"}
        _queue_jobs(base, auth, 4)
        _wait_ready(base, auth, 4)
        first_run = True
        worker: Worker

        def handler(lease: Lease) -> list[dict[str, Any]]:
            if first_run:
                worker.stop()  # from a handler: the rest of this batch is still done
                with pytest.raises(RuntimeError, match="running already"):
                    worker.run()
                time.sleep(2.0)  # the batch takes 4 s, past its 3 s leases
            return [event(type="job.done", data={"n": lease.trigger["data"]["n"]})]

        with Worker(base, key, queue="jobs", name="w", handler=handler, batch=2, wait_s=0.5,
                    lease_s=3.0) as worker:  # fmt: skip
            stopped = worker.run()
            first_run = False
            assert (stopped.leased, stopped.completed, stopped.lost) == (2, 2, 0), stopped
            again = worker.run(max_tasks=1)  # counted in this run, not since the worker began
            assert (again.leased, again.completed, again.lost) == (1, 1, 0), again
            worker.stop()  # between runs: the next run leases nothing ...
            assert worker.run(until_idle=True).leased == 0
            last = worker.run(until_idle=True)  # ... and the one after works
            assert (last.leased, last.completed, last.lost) == (1, 1, 0), last
            assert (worker.stats.leased, worker.stats.completed, worker.stats.lost) == (4, 4, 0)
        queue = httpx2.get(f"{base}/queues", headers=auth).json()["queues"][0]
        assert (queue["ready"], queue["in_flight"], queue["dead_letters"]) == (0, 0, 0)
        done = httpx2.get(f"{base}/replay", params={"types": "job.done"}, headers=auth)
        assert sorted(orjson.loads(line)["data"]["n"] for line in done.text.splitlines()) == [
            0, 1, 2, 3
        ]  # fmt: skip


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_a_handler_error_of_any_text_fails_its_task_not_the_worker(
    database_url: URL, tmp_path: Path
) -> None:
    # U+0000 (PostgreSQL cannot store it: 422 for the whole report), an unpaired surrogate
    # (not UTF-8: JSON encoding raises), text long once escaped, a class the service does
    # not take, and an exception that cannot be shown each fail their task alone; so do
    # results that cannot be sent as JSON (a set), which ended run() with a TypeError.
    url = database_url.render_as_string(hide_password=False)
    env = environment(CAUSEWAY_DATABASE_URL=url, CAUSEWAY_DATA_DIR=str(tmp_path))
    key = create_key(env, "acme", "admin,worker")
    errors: list[Exception] = [
        ValueError("bad frame header \x00\x01"),
        ValueError(b"bad name \xff".decode("utf-8", "surrogateescape")),
        TaskFailed("data_invalid", "\x00" * 3000),
        TaskFailed("bogus", "no such class"),
        _Unprintable(),
    ]
    with serving(env) as base:
        auth = {"Authorization": f"Bearer {key}"}
        _queue_jobs(base, auth, len(errors) + 2, max_retries=0)
        _wait_ready(base, auth, len(errors) + 2)
        task_of: dict[int, str] = {}

        def handler(lease: Lease) -> list[dict[str, Any]]:
            n = lease.trigger["data"]["n"]
            task_of[n] = lease.task_id
            if n < len(errors):
                raise errors[n]
            if n == len(errors):
                return [event(type="job.done", data={"seen": {1, 2}})]
            return []

        with Worker(base, key, queue="jobs", name="w", handler=handler, batch=10,
                    wait_s=0.5) as worker:  # fmt: skip
            stats = worker.run(until_idle=True)
        assert (stats.leased, stats.failed, stats.completed, stats.lost) == (7, 6, 1, 0), stats
        dead = httpx2.get(f"{base}/dead-letters", params={"queue": "jobs"}, headers=auth)
        error = {task["id"]: task["error"] for task in dead.json()["dead_letters"]}
        assert [error[task_of[n]] for n in range(len(errors))] == [
            {"class": "unknown", "message": "ValueError: bad frame header \\u0000\x01"},
            {"class": "unknown", "message": "ValueError: bad name \\udcff"},
            {"class": "data_invalid", "message": "\\u0000" * 666 + "\\u00"},  # 4,000
            {"class": "unknown", "message": "TaskFailed('bogus'): no such class"},
            {"class": "unknown", "message": "_Unprintable: <_Unprintable that cannot be shown>"},
        ]
        assert error[task_of[len(errors)]] == {
            "class": "unknown",
            "message": "TypeError: Type is not JSON serializable: set",
        }


def _wait_ready(base: str, auth: dict[str, str], count: int) -> None:
    """Until the dispatcher has made ``count`` tasks ready (so one lease finds them all)."""
    deadline = time.monotonic() + 20
    while True:
        queues = httpx2.get(f"{base}/queues", headers=auth).json()["queues"]
        if queues and queues[0]["ready"] >= count:
            return
        assert time.monotonic() < deadline, "the tasks were not made in time"
        time.sleep(0.1)


def test_a_handler_answer_that_lists_no_events_fails_its_task_not_the_batch(
    database_url: URL, tmp_path: Path
) -> None:
    """A list holding no event (``[None]``) or one event not in a list refused the whole
    completion (422) and ended ``run()``: the batch's tasks done were never completed."""
    url = database_url.render_as_string(hide_password=False)
    env = environment(CAUSEWAY_DATABASE_URL=url, CAUSEWAY_DATA_DIR=str(tmp_path))
    key = create_key(env, "acme", "admin,worker")
    with serving(env) as base:
        auth = {"Authorization": f"Bearer {key}"}
        _queue_jobs(base, auth, 4, max_retries=0)
        _wait_ready(base, auth, 4)

        def handler(lease: Lease) -> Any:
            n = lease.trigger["data"]["n"]
            done = event(type="job.done", data={"n": n})
            return [None] if n == 0 else done if n == 1 else [done]

        with Worker(base, key, queue="jobs", name="w", handler=handler, batch=4,
                    wait_s=0.5) as worker:  # fmt: skip
            stats = worker.run(until_idle=True)
        assert (stats.leased, stats.completed, stats.failed, stats.lost) == (4, 2, 2, 0), stats
        done = httpx2.get(f"{base}/replay", params={"types": "job.done"}, headers=auth)
        assert sorted(orjson.loads(line)["data"]["n"] for line in done.text.splitlines()) == [2, 3]


def test_failures_past_the_request_cap_are_reported_in_parts(
    database_url: URL, tmp_path: Path
) -> None:
    """A batch's failures went in one POST /tasks/fail: a hundred messages of 4,000
    characters pass the default 256 KiB cap, and the 413 ended run(), the batch's tasks
    done never completed. Scaled down: a 16 KiB cap, ten messages of 4,000."""
    url = database_url.render_as_string(hide_password=False)
    env = environment(
        CAUSEWAY_DATABASE_URL=url,
        CAUSEWAY_DATA_DIR=str(tmp_path),
        CAUSEWAY_MAX_JSON_BODY_BYTES=str(16 << 10),
    )
    key = create_key(env, "acme", "admin,worker")
    with serving(env) as base:
        auth = {"Authorization": f"Bearer {key}"}
        _queue_jobs(base, auth, 11, max_retries=0)
        _wait_ready(base, auth, 11)

        def handler(lease: Lease) -> list[dict[str, Any]]:
            if lease.trigger["data"]["n"] == 0:
                return [event(type="job.done", data={"n": 0})]
            raise TaskFailed("data_invalid", "upstream said: " + "x" * 3985)

        with Worker(base, key, queue="jobs", name="w", handler=handler, batch=11,
                    wait_s=0.5) as worker:  # fmt: skip
            stats = worker.run(until_idle=True)
        assert (stats.leased, stats.completed, stats.failed, stats.lost) == (11, 1, 10, 0), stats


def _queue_jobs(base: str, auth: dict[str, str], count: int, **route: Any) -> None:
    """A route from ``job`` events to the queue ``jobs``, and ``count`` jobs ``{"n": n}``."""
    route = {"id": "jobs", "types": ["job"], "kind": "run", "queue": "jobs", **route}
    posted = httpx2.post(f"{base}/routes", content=orjson.dumps(route), headers={**JSON, **auth})
    assert posted.status_code == 201
    jobs = [event(type="job", data={"n": n}) for n in range(count)]
    posted = httpx2.post(f"{base}/events", content=orjson.dumps(jobs), headers={**BATCH, **auth})
    assert posted.status_code == 201


async def _chain_verifies(database_url: URL) -> bool:
    engine = create_engine(database_url, pool_size=1)
    try:
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="REPEATABLE READ")
            async with conn.begin():
                return (await verify_chain(conn)).is_intact
    finally:
        await engine.dispose()
