"""A lease request sent again after its answer was lost: with the same ``request_id`` it
gets back the tasks it leased, under the same leases, and leases nothing else, so those
tasks neither wait out their leases nor lose an attempt (as SQS's
``ReceiveRequestAttemptId``). The worker library names each request and sends that name
again when it retries."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx2
import pytest
from fastapi import FastAPI
from sqlalchemy import URL, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.main import create_app, dispose
from app.settings import Settings
from ingest.worker import Worker
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import BATCH, JSON, dumps, event
from tests.integration.process import create_key, environment, serving
from tests.integration.scheduler.conftest import Client, define, queues
from tests.integration.scheduler.test_worker_library import _queue_jobs


@pytest.fixture
async def app(database_url: URL) -> AsyncIterator[FastAPI]:
    app = create_app(Settings(_env_file=None, run_scheduler=False), database_url=database_url)
    yield app
    await dispose(app)


@pytest.fixture
async def worker(app: FastAPI, make_key: MakeKey) -> AsyncIterator[Client]:
    async with asgi_client(app, await make_key("acme", "admin")) as admin:
        await define(admin, id="r", types=["job"], kind="infer", queue="q")
        jobs = [event(type="job", subject=f"job-{n}") for n in range(5)]
        assert (await admin.post("/events", content=dumps(jobs), headers=BATCH)).status_code == 201
        await catch_up(app)
        yield admin


async def lease(client: Client, **body: Any) -> list[dict[str, Any]]:
    response = await client.post(
        "/queues/q/lease", content=dumps({"worker": "w1", "max_tasks": 2, **body}), headers=JSON
    )
    assert response.status_code in (200, 204), response.text
    return [] if response.status_code == 204 else list(response.json()["tasks"])


def held(leases: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(found["task"]["id"], found["lease"], found["expires_at"]) for found in leases]


async def ready(client: Client) -> int:
    return int((await queues(client))["q"]["ready"])


async def test_a_lease_request_sent_again_gets_its_leases_back(worker: Client) -> None:
    first = await lease(worker, request_id="req-1")
    again = await lease(worker, request_id="req-1")
    assert len(first) == 2
    assert held(again) == held(first)
    assert again[0]["trigger"] == first[0]["trigger"]
    assert await ready(worker) == 3  # nothing else was leased
    # A new name is a new request.
    other = await lease(worker, request_id="req-2")
    assert {t for t, _, _ in held(other)}.isdisjoint({t for t, _, _ in held(first)})


async def test_a_completion_sent_again_answers_as_before_and_gives_the_leases_back(
    worker: Client,
) -> None:
    [one, two] = await lease(worker)
    body = {
        "worker": "w1",
        "max_tasks": 2,
        "request_id": "req-7",
        "complete": [{"task": one["task"]["id"], "lease": one["lease"], "events": []}],
    }
    answers = []
    for _ in range(2):  # the first answer is lost on its way back
        response = await worker.post("/queues/q/lease", content=dumps(body), headers=JSON)
        assert response.status_code == 200, response.text
        answers.append(response.json())
    assert [c["status"] for c in answers[1]["completed"]] == [200]
    assert answers[1]["completed"] == answers[0]["completed"]
    assert held(answers[1]["tasks"]) == held(answers[0]["tasks"])
    assert len(answers[0]["tasks"]) == 2
    assert await ready(worker) == 1
    assert two["task"]["id"] not in {t for t, _, _ in held(answers[0]["tasks"])}


async def test_a_request_id_finds_only_what_its_worker_still_holds(worker: Client) -> None:
    [first] = await lease(worker, request_id="req-1", max_tasks=1)
    # Another worker naming its request alike gets tasks of its own.
    [theirs] = await lease(worker, request_id="req-1", max_tasks=1, worker="w2")
    assert theirs["task"]["id"] != first["task"]["id"]
    # Once the task is completed, the name finds nothing held: a new lease is made.
    done = await worker.post(
        f"/tasks/{first['task']['id']}/complete",
        content=dumps({"lease": first["lease"], "events": []}),
        headers=JSON,
    )
    assert done.status_code == 200, done.text
    [after] = await lease(worker, request_id="req-1", max_tasks=1)
    assert after["task"]["id"] not in (first["task"]["id"], theirs["task"]["id"])


@pytest.mark.parametrize("complete", [False, True], ids=["lease", "complete-and-lease"])
async def test_a_request_sent_again_while_its_first_try_runs_gets_that_try_s_leases(
    worker: Client, engine: AsyncEngine, complete: bool
) -> None:
    """A worker whose client timed out sends the request again while its first try is
    still at work (here: waiting to append its decisions). The second try waits for the
    first and answers its leases; it leased two others, and the first's tasks, answered
    to no one, waited out their leases."""
    body: dict[str, Any] = {"request_id": "req-1"}
    if complete:
        [done] = await lease(worker, max_tasks=1)
        body["complete"] = [{"task": done["task"]["id"], "lease": done["lease"], "events": []}]
    async with engine.begin() as blocker:  # no append gets through until it commits
        await blocker.execute(text("LOCK TABLE events IN SHARE MODE"))
        first = asyncio.create_task(lease(worker, **body))
        await asyncio.sleep(0.5)  # the first try waits on its append, its rows locked
        again = asyncio.create_task(lease(worker, **body))
        await asyncio.sleep(0.5)
    assert held(await again) == held(await first)
    assert len(await first) == 2
    assert await ready(worker) == (2 if complete else 3)


@pytest.mark.parametrize(
    "request_id", ["", "a b", "x" * 129, "caf\u00e9", 7], ids=["empty", "space", "long", "é", "int"]
)
async def test_a_request_id_that_is_no_name_is_refused(worker: Client, request_id: Any) -> None:
    response = await worker.post(
        "/queues/q/lease", content=dumps({"worker": "w1", "request_id": request_id}), headers=JSON
    )
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert "request_id" in response.text


class _LosingProxy(BaseHTTPRequestHandler):
    """Forwards each request to ``upstream``; of the lease requests, the first plain one
    and the first that completes tasks are run whole but never answered: the connection
    closes, and the worker sees a transport error."""

    upstream = ""
    lost: ClassVar[list[str]] = []
    on_loss: ClassVar[list[Callable[[], None]]] = []  # called as an answer is lost

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        answer = httpx2.post(self.upstream + self.path, content=body, headers=headers, timeout=60)
        kind = "complete" if b'"complete"' in body else "lease"
        if self.path.endswith("/lease") and kind not in self.lost:
            self.lost.append(kind)
            for call in self.on_loss:
                call()
            self.close_connection = True
            return
        self.send_response(answer.status_code)
        for name, value in answer.headers.items():
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def losing(database_url: URL, tmp_path: Path, jobs: int) -> Iterator[tuple[str, str, str]]:
    """A real serve with ``jobs`` tasks queued, behind a ``_LosingProxy``: the service's
    URL, an admin's key, and the proxy's URL."""
    env = environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
    )
    key = create_key(env, "acme", "admin,worker")
    with serving(env) as base:
        _queue_jobs(base, {"Authorization": f"Bearer {key}"}, jobs)
        _LosingProxy.upstream, _LosingProxy.lost, _LosingProxy.on_loss = base, [], []
        proxy = ThreadingHTTPServer(("127.0.0.1", 0), _LosingProxy)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        try:
            yield base, key, f"http://127.0.0.1:{proxy.server_address[1]}"
        finally:
            proxy.shutdown()
            proxy.server_close()


def _idle(base: str, key: str) -> tuple[int, int]:
    queue = httpx2.get(f"{base}/queues", headers={"Authorization": f"Bearer {key}"})
    found = queue.json()["queues"][0]
    return found["ready"], found["in_flight"]


def test_the_worker_library_sends_a_retry_under_the_same_name(
    database_url: URL, tmp_path: Path
) -> None:
    seen: list[str] = []
    with losing(database_url, tmp_path, 12) as (base, key, front):
        with Worker(
            front, key, queue="jobs", name="w1", handler=lambda lease: seen.append(lease.task_id),
            batch=4, wait_s=2.0, lease_s=60.0, max_backoff_s=0.2,
        ) as library:  # fmt: skip
            library.run(until_idle=True)
        assert _LosingProxy.lost == ["lease", "complete"]
        # Every task ran once and completed: none was left leased to a lost answer.
        assert len(seen) == len(set(seen)) == 12
        assert library.stats.completed == 12
        assert _idle(base, key) == (0, 0)


def test_a_stop_while_a_lease_answer_is_lost_still_works_what_it_leased(
    database_url: URL, tmp_path: Path
) -> None:
    """A stop() (a SIGTERM handler's) as the answer to a lease request is lost: the
    service leased the task to this worker, and the worker, stopping, gave up on the
    request. The task waited out its lease held by no one and lost its attempt (with
    max_retries 0, dead-lettered unrun). A lease request whose answer may have held leases
    is sent again, stopping or not, and what it leased is worked and completed."""
    seen: list[str] = []
    with losing(database_url, tmp_path, 1) as (base, key, front):
        with Worker(
            front, key, queue="jobs", name="w1", handler=lambda lease: seen.append(lease.task_id),
            batch=1, wait_s=0.5, lease_s=60.0, max_backoff_s=0.1,
        ) as library:  # fmt: skip
            _LosingProxy.on_loss = [library.stop]
            stats = library.run()
        assert _LosingProxy.lost == ["lease"]
        assert (len(seen), stats.completed) == (1, 1), stats
        assert _idle(base, key) == (0, 0)
