"""The worker library against a real ``causeway serve`` (one per module), and helpers to
queue jobs and read a queue's state."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from secrets import token_hex
from typing import Any

import httpx2
import orjson
import pytest
from sqlalchemy import URL

from tests.conftest import janitor
from tests.integration.events import BATCH, JSON, event
from tests.integration.process import create_key, environment, serving


@pytest.fixture(scope="module")
def service(
    server: URL, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """One ``causeway serve`` for the module: its address and an admin+worker key."""
    name = f"causeway_worker_svc_{token_hex(4)}"
    with janitor(server, name, template_dbname=template_db):
        url = server.set(database=name).render_as_string(hide_password=False)
        data = Path(tmp_path_factory.mktemp("data"))
        env = environment(
            CAUSEWAY_DATABASE_URL=url,
            CAUSEWAY_DATA_DIR=str(data),
            CAUSEWAY_SCHEDULER_SWEEP_INTERVAL_S="0.5",
        )
        key = create_key(env, "acme", "admin,worker")
        with serving(env) as base:
            yield base, key


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def queue_jobs(base: str, key: str, queue: str, count: int, **route: Any) -> list[str]:
    """Route ``job.<queue>`` events to ``queue``; post ``count``; wait until ready. The
    jobs' event ids."""
    route = {"id": queue, "types": [f"job.{queue}"], "kind": "run", "queue": queue, **route}
    posted = httpx2.post(
        f"{base}/routes", content=orjson.dumps(route), headers={**JSON, **auth(key)}
    )
    assert posted.status_code == 201, posted.text
    jobs = [event(type=f"job.{queue}", data={"n": n}) for n in range(count)]
    posted = httpx2.post(
        f"{base}/events", content=orjson.dumps(jobs), headers={**BATCH, **auth(key)}
    )
    assert posted.status_code == 201, posted.text
    deadline = time.monotonic() + 20
    while True:
        depth = queue_state(base, key, queue)
        if depth and depth["ready"] >= count:
            return [job["id"] for job in jobs]
        assert time.monotonic() < deadline, "the tasks were not made in time"
        time.sleep(0.1)


def queue_state(base: str, key: str, queue: str) -> dict[str, Any]:
    found = httpx2.get(f"{base}/queues", headers=auth(key)).json()["queues"]
    return dict({q["queue"]: q for q in found}.get(queue, {}))


def task(base: str, key: str, task_id: str) -> dict[str, Any]:
    answer = httpx2.get(f"{base}/tasks/{task_id}", headers=auth(key))
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def replayed(base: str, key: str, event_type: str) -> list[dict[str, Any]]:
    answer = httpx2.get(f"{base}/replay", params={"types": event_type}, headers=auth(key))
    return [orjson.loads(line) for line in answer.text.splitlines() if line]
