"""The worker library (``ingest.worker``) against a real ``causeway serve``, as the bench
runs it: workers lease and complete in batches, a failed attempt is retried, every task
completes once, a long task keeps its lease by heartbeats, and the chain verifies after."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import httpx2
import orjson
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
