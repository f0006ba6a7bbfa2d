"""The worker library backs off while the service answers 429 or 503, for as long as its
``Retry-After`` says, and then goes on: no task is dropped and nothing is raised. The
service here is a stand-in on a loopback port that answers as a busy Causeway does."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import orjson
import pytest

from ingest.worker import Worker

LEASE = {
    "task": {"id": "t1", "attempts": 1},
    "lease": "l1",
    "expires_at": "2999-01-01T00:00:00+00:00",
    "trigger": {"id": "e1", "data": {"n": 1}},
}


class Busy(BaseHTTPRequestHandler):
    """Leases: 429 (Retry-After: 1), then 503 (no Retry-After), then a task, then none.
    Completions (which the worker sends with its next lease request): 503 once, then each
    task answered, and no task leased."""

    answers: ClassVar[dict[str, list[tuple[int, dict[str, str], Any]]]] = {}
    seen: ClassVar[list[tuple[str, float]]] = []

    def do_POST(self) -> None:
        body = orjson.loads(self.rfile.read(int(self.headers["Content-Length"])))
        path = self.path + ("+complete" if "complete" in body else "")
        Busy.seen.append((path, time.monotonic()))
        queue = Busy.answers[path]
        status, headers, body = queue.pop(0) if len(queue) > 1 else queue[0]
        payload = orjson.dumps(body) if body is not None else b""
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def busy() -> Iterator[str]:
    problem = {"type": "/problems/unavailable", "status": 503, "detail": "busy"}
    Busy.seen = []
    Busy.answers = {
        "/queues/q/lease": [
            (429, {"Retry-After": "1"}, {**problem, "status": 429}),
            (503, {}, problem),
            (200, {}, {"tasks": [LEASE]}),
            (204, {}, None),
        ],
        "/queues/q/lease+complete": [
            (503, {}, problem),
            (200, {}, {"tasks": [], "completed": [{"task": "t1", "status": 200, "results": []}]}),
        ],
    }
    server = ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_worker_waits_out_429_and_503_and_then_completes_its_task(busy: str) -> None:
    with Worker(busy, "key", queue="q", name="w1", handler=lambda _: [], wait_s=0) as worker:
        stats = worker.run(until_idle=True)
    assert (stats.leased, stats.completed, stats.lost, stats.backoffs) == (1, 1, 0, 3)
    leases = [at for path, at in Busy.seen if path == "/queues/q/lease"]
    assert leases[1] - leases[0] >= 1.0  # Retry-After: 1 was honoured
    assert [path for path, _ in Busy.seen].count("/queues/q/lease+complete") == 2  # sent again
