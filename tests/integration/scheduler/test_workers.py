"""Real worker processes over HTTP against a real ``causeway serve``: every task runs to
completion exactly once, retries included, and results trace back to their triggers."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx2
import orjson
from sqlalchemy import URL

from tests.integration.events import BATCH, JSON, event
from tests.integration.process import create_key, environment, serving

TASKS = 60
WORKERS = 4


def test_worker_processes_share_a_queue_and_complete_every_task_once(
    database_url: URL, tmp_path: Path
) -> None:
    url = database_url.render_as_string(hide_password=False)
    env = environment(
        CAUSEWAY_DATABASE_URL=url,
        CAUSEWAY_DATA_DIR=str(tmp_path),
        CAUSEWAY_PROJECTION_POLL_INTERVAL_S="0.2",
    )
    admin = create_key(env, "acme", "admin")
    worker_key = create_key(env, "acme", "worker")
    with serving(env) as base:
        auth = {"Authorization": f"Bearer {admin}"}
        route = {
            "id": "jobs", "types": ["job.submitted"], "kind": "run", "queue": "jobs",
            "max_retries": 2, "backoff_base_s": 0.05,
        }  # fmt: skip
        assert (
            httpx2.post(
                f"{base}/routes", content=orjson.dumps(route), headers={**JSON, **auth}
            ).status_code
            == 201
        )
        jobs = [event(type="job.submitted", data={"n": n}) for n in range(TASKS)]
        posted = httpx2.post(
            f"{base}/events", content=orjson.dumps(jobs), headers={**BATCH, **auth}
        )
        assert posted.status_code == 201
        deadline = time.monotonic() + 30
        while _ready(base, auth) < TASKS:  # the dispatcher runs in serve
            assert time.monotonic() < deadline, "the tasks were not created in time"
            time.sleep(0.1)

        workers = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.integration.scheduler.worker", base, worker_key,
                 "jobs", f"w{n}", *(["--fail-first"] if n == 0 else [])],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )
            for n in range(WORKERS)
        ]  # fmt: skip
        reports = []
        for process in workers:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err.decode()
            reports.append([orjson.loads(line) for line in out.splitlines()])

        completed = [r["task"] for found in reports for r in found if r["outcome"] == "completed"]
        assert len(completed) == len(set(completed)) == TASKS
        assert sum(1 for found in reports if found) >= 2, "the workers shared the queue"
        retried = [r for r in reports[0] if r["outcome"] == "failed"]
        assert all(r["task"] in completed for r in retried)
        queue = httpx2.get(f"{base}/queues", headers=auth).json()["queues"][0]
        assert (queue["ready"], queue["in_flight"], queue["dead_letters"]) == (0, 0, 0)

        one = jobs[7]["id"]
        results = httpx2.get(f"{base}/replay", params={"types": "job.done"}, headers=auth)
        causes = {
            orjson.loads(line)["data"]["input"]["n"]: orjson.loads(line)["causationid"]
            for line in results.text.splitlines()
        }
        assert causes[7] == one


def _ready(base: str, auth: dict[str, str]) -> int:
    found = httpx2.get(f"{base}/queues", headers=auth).json()["queues"]
    return sum(q["ready"] + q["in_flight"] for q in found)
