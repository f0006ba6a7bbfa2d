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
def service() -> Iterator[str]:
    """The stand-in's address; each test sets ``Busy.answers``."""
    Busy.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


PROBLEM = {"type": "/problems/unavailable", "status": 503, "detail": "busy"}


@pytest.fixture
def busy(service: str) -> str:
    Busy.answers = {
        "/queues/q/lease": [
            (429, {"Retry-After": "1"}, {**PROBLEM, "status": 429}),
            (503, {}, PROBLEM),
            (200, {}, {"tasks": [LEASE]}),
            (204, {}, None),
        ],
        "/queues/q/lease+complete": [
            (503, {}, PROBLEM),
            (200, {}, {"tasks": [], "completed": [{"task": "t1", "status": 200, "results": []}]}),
        ],
    }
    return service


def test_a_worker_waits_out_429_and_503_and_then_completes_its_task(busy: str) -> None:
    with Worker(busy, "key", queue="q", name="w1", handler=lambda _: [], wait_s=0) as worker:
        stats = worker.run(until_idle=True)
    assert (stats.leased, stats.completed, stats.lost, stats.backoffs) == (1, 1, 0, 3)
    leases = [at for path, at in Busy.seen if path == "/queues/q/lease"]
    assert leases[1] - leases[0] >= 1.0  # Retry-After: 1 was honoured
    assert [path for path, _ in Busy.seen].count("/queues/q/lease+complete") == 2  # sent again


def test_a_retry_after_that_is_no_number_is_read_as_none(service: str) -> None:
    """A proxy's ``Retry-After: nan`` is a doubling pause, not ``time.sleep(nan)``."""
    Busy.answers = {"/queues/q/lease": [(503, {"Retry-After": "nan"}, PROBLEM), (204, {}, None)]}
    with Worker(service, "key", queue="q", name="w1", handler=lambda _: [], wait_s=0) as worker:
        stats = worker.run(until_idle=True)
    assert stats.backoffs == 1
    assert len(Busy.seen) == 2


def test_retry_after_is_waited_out_past_max_backoff_s(service: str) -> None:
    """``max_backoff_s`` bounds the worker's own doubling pause, not the service's word."""
    busy = (429, {"Retry-After": "2"}, {**PROBLEM, "status": 429})
    Busy.answers = {"/queues/q/lease": [busy, (204, {}, None)]}
    with Worker(
        service, "key", queue="q", name="w1", handler=lambda _: [], wait_s=0, max_backoff_s=0.5
    ) as worker:
        worker.run(until_idle=True)
    assert len(Busy.seen) == 2
    assert Busy.seen[1][1] - Busy.seen[0][1] >= 2.0


def test_stop_ends_a_run_that_is_backing_off_with_nothing_leased(service: str) -> None:
    """``stop()`` (from a signal handler, another thread) while the service answers 503 and
    the worker holds no task ends the run. (It went on retrying its lease request for as
    long as the service was busy.)"""
    Busy.answers = {"/queues/q/lease": [(503, {"Retry-After": "1"}, PROBLEM)]}
    worker = Worker(service, "key", queue="q", name="w1", handler=lambda _: [], wait_s=0)
    running = threading.Thread(target=worker.run, daemon=True)
    try:
        running.start()
        time.sleep(0.5)
        worker.stop()
        running.join(timeout=5.0)
        assert not running.is_alive(), f"still retrying 5 s after stop() ({len(Busy.seen)} tries)"
    finally:
        Busy.answers = {"/queues/q/lease": [(204, {}, None)]}  # let a run left over end
        running.join(timeout=10.0)
        worker.close()
