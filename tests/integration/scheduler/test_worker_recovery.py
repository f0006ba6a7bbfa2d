"""The worker library (``ingest.worker``) when the way to the service misbehaves: an answer
lost, a reverse proxy's 502, a batch past the request cap (a stop during an outage is
in test_worker_backoff.py).

Each test runs the worker against a real ``causeway serve`` (one for the module, a queue
of its own per test), sometimes through a small proxy that misbehaves as a network or a
reverse proxy does."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from secrets import token_hex
from typing import Any, ClassVar

import httpx2
import orjson
import pytest
from sqlalchemy import URL

from ingest.client import Lease
from ingest.worker import Worker
from tests.conftest import janitor
from tests.integration.events import BATCH, JSON, event
from tests.integration.process import create_key, environment, serving


@pytest.fixture(scope="module")
def service(
    server: URL, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """One ``causeway serve`` for the module: its address and an admin+worker key."""
    name = f"causeway_review_worker_{token_hex(4)}"
    with janitor(server, name, template_dbname=template_db):
        url = server.set(database=name).render_as_string(hide_password=False)
        data = Path(tmp_path_factory.mktemp("data"))
        env = environment(CAUSEWAY_DATABASE_URL=url, CAUSEWAY_DATA_DIR=str(data))
        key = create_key(env, "acme", "admin,worker")
        with serving(env) as base:
            yield base, key


def _queue_jobs(base: str, key: str, queue: str, count: int, **route: Any) -> None:
    """Route ``job.<queue>`` events to ``queue``; post ``count`` of them; wait until ready."""
    auth = {"Authorization": f"Bearer {key}"}
    route = {"id": queue, "types": [f"job.{queue}"], "kind": "run", "queue": queue, **route}
    posted = httpx2.post(f"{base}/routes", content=orjson.dumps(route), headers={**JSON, **auth})
    assert posted.status_code == 201, posted.text
    jobs = [event(type=f"job.{queue}", data={"n": n}) for n in range(count)]
    posted = httpx2.post(f"{base}/events", content=orjson.dumps(jobs), headers={**BATCH, **auth})
    assert posted.status_code == 201, posted.text
    deadline = time.monotonic() + 20
    while True:
        found = httpx2.get(f"{base}/queues", headers=auth).json()["queues"]
        depth = {q["queue"]: q for q in found}.get(queue)
        if depth and depth["ready"] >= count:
            return
        assert time.monotonic() < deadline, "the tasks were not made in time"
        time.sleep(0.1)


def _queue_state(base: str, key: str, queue: str) -> dict[str, Any]:
    found = httpx2.get(f"{base}/queues", headers={"Authorization": f"Bearer {key}"}).json()
    return dict({q["queue"]: q for q in found["queues"]}[queue])


class _Proxy(BaseHTTPRequestHandler):
    """Forwards each request to ``upstream``, unless ``decide(path, body)`` answers
    something else: ``("drop", delay_s)`` forwards it, waits ``delay_s`` and closes the
    connection unanswered (an answer lost on its way back); ``("answer", status)`` answers
    that status with an HTML body without forwarding (a reverse proxy's own error)."""

    upstream = ""
    decide: Callable[[str, dict[str, Any]], tuple[str, float] | None] = staticmethod(
        lambda _path, _body: None
    )
    seen: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = orjson.loads(raw) if raw else {}
        _Proxy.seen.append(self.path)
        what = _Proxy.decide(self.path, body)
        if what is not None and what[0] == "answer":
            page = b"<html><body>502 Bad Gateway</body></html>"
            self.send_response(int(what[1]))
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        answer = httpx2.post(self.upstream + self.path, content=raw, headers=headers, timeout=60)
        if what is not None and what[0] == "drop":
            time.sleep(float(what[1]))
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


@pytest.fixture
def proxy(service: tuple[str, str]) -> Iterator[str]:
    _Proxy.upstream, _Proxy.seen = service[0], []
    _Proxy.decide = staticmethod(lambda _path, _body: None)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_leases_got_back_by_a_retry_are_heartbeated_before_they_run_out(
    service: tuple[str, str], proxy: str
) -> None:
    """A lease request's answer is lost; the worker sends it again under the same name
    (README: "A lost answer") and gets the same leases, with the same expiries, 2 s later.
    Its first heartbeat is due half the lease after the first try was sent. (Counted from
    the retry's answer, it came after the lease had run out: the completion was refused,
    lease-lost, and the task ran twice.)"""
    base, key = service
    _queue_jobs(base, key, "retried", 1)
    lost: list[str] = []

    def decide(path: str, body: dict[str, Any]) -> tuple[str, float] | None:
        if path.endswith("/lease") and "complete" not in body and not lost:
            lost.append(body["request_id"])
            return ("drop", 2.0)  # the lease is granted; its answer never comes
        return None

    _Proxy.decide = staticmethod(decide)
    ran: list[str] = []

    def handler(lease: Lease) -> list[dict[str, Any]]:
        ran.append(lease.task_id)
        if len(ran) == 1:
            time.sleep(4.0)  # a long task: heartbeats must keep its 3 s lease
        return []

    with Worker(proxy, key, queue="retried", name="w1", handler=handler, batch=1, wait_s=0.5,
                lease_s=3.0, max_backoff_s=0.1) as worker:  # fmt: skip
        stats = worker.run(until_idle=True)
    assert lost, "the proxy lost no answer"
    assert (stats.completed, stats.lost) == (1, 0), stats
    assert len(ran) == 1, f"the task ran {len(ran)} times"


def test_a_heartbeat_answered_502_by_a_proxy_is_tried_again(
    service: tuple[str, str], proxy: str
) -> None:
    """A reverse proxy (docs/deployment.md puts nginx in front) answers one heartbeat with
    502: the heartbeat is tried again. (Any answer but 429/503 was taken for "the lease is
    lost", and the task's lease ran out under it.)"""
    base, key = service
    _queue_jobs(base, key, "beats", 1)
    refused: list[str] = []

    def decide(path: str, body: dict[str, Any]) -> tuple[str, float] | None:
        if path.endswith("/heartbeat") and not refused:
            refused.append(path)
            return ("answer", 502)
        return None

    _Proxy.decide = staticmethod(decide)
    ran: list[str] = []

    def handler(lease: Lease) -> list[dict[str, Any]]:
        ran.append(lease.task_id)
        if len(ran) == 1:
            time.sleep(9.0)  # a long task: heartbeats must keep its 6 s lease
        return []

    with Worker(proxy, key, queue="beats", name="w1", handler=handler, batch=1, wait_s=0.5,
                lease_s=6.0, max_backoff_s=0.1) as worker:  # fmt: skip
        stats = worker.run(until_idle=True)
    assert refused, "no heartbeat was sent"
    assert (stats.completed, stats.lost) == (1, 0), stats
    assert len(ran) == 1, f"the task ran {len(ran)} times"


def test_a_completion_answered_502_by_a_proxy_is_sent_again(
    service: tuple[str, str], proxy: str
) -> None:
    """The service behind nginx (docs/deployment.md) restarts: nginx answers the request
    that completes a batch and leases the next with 502. The request is named
    (request_id), so sending it again is safe, and it is sent again. (Only 429 and 503
    were: ``run()`` raised, and the batch's results were never sent.)"""
    base, key = service
    _queue_jobs(base, key, "gateway", 4)
    refused: list[str] = []

    def decide(path: str, body: dict[str, Any]) -> tuple[str, float] | None:
        if path.endswith("/lease") and "complete" in body and not refused:
            refused.append(body["request_id"])
            return ("answer", 502)
        return None

    _Proxy.decide = staticmethod(decide)
    with Worker(proxy, key, queue="gateway", name="w1", handler=lambda _: [], batch=2,
                wait_s=0.5, lease_s=60.0, max_backoff_s=0.1) as worker:  # fmt: skip
        stats = worker.run(until_idle=True)
    assert refused
    assert (stats.completed, stats.lost) == (4, 0), stats
    state = _queue_state(base, key, "gateway")
    assert (state["ready"], state["in_flight"]) == (0, 0), state


def test_a_batch_whose_results_together_pass_the_request_cap_is_completed(
    database_url: URL, tmp_path: Path
) -> None:
    """Each task's results fit ``CAUSEWAY_MAX_REQUEST_BYTES``; the batch's together do
    not. The lease request that would complete them is refused (413 past the lease cap)
    and the worker falls back to ``POST /tasks/complete`` with the whole batch, which is
    refused 413 too. The batch is completed in halves now. (``run()`` raised, and every
    result of the batch was lost.)"""
    env = environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
        CAUSEWAY_MAX_JSON_BODY_BYTES="1024",
        CAUSEWAY_MAX_REQUEST_BYTES="65536",
    )
    key = create_key(env, "acme", "admin,worker")
    with serving(env) as base:
        _queue_jobs(base, key, "big", 3)

        def handler(lease: Lease) -> list[dict[str, Any]]:
            n = lease.trigger["data"]["n"]
            return [event(type="job.done", data={"n": n, "pad": "x" * 30_000})]  # ~30 KB

        with Worker(base, key, queue="big", name="w1", handler=handler, batch=3,
                    wait_s=0.5, lease_s=60.0) as worker:  # fmt: skip
            stats = worker.run(until_idle=True)
        assert (stats.completed, stats.lost) == (3, 0), stats
        state = _queue_state(base, key, "big")
        assert (state["ready"], state["in_flight"]) == (0, 0), state
