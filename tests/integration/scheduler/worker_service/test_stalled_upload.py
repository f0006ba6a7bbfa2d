"""The network stalls while a worker sends the request that completes its batch and leases
the next: no byte of the body arrives for ``CAUSEWAY_BODY_TIMEOUT_S`` (nginx's
``client_body_timeout`` in front does the same), and the service answers ``408
body-timeout`` without having read the request. RFC 9110 (15.5.9): the client may repeat
it, and the worker does. It took the 408 for a refusal: ``run()`` raised, and the
batch's results, done and never stored, were dropped. Scaled down: a 1 s body timeout,
and a proxy (the network) that stalls the first such body 2.5 s halfway."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx2
import orjson
from sqlalchemy import URL

from ingest.client import Lease
from ingest.worker import Worker
from tests.integration.events import event
from tests.integration.process import create_key, environment, serving
from tests.integration.scheduler.worker_service.conftest import queue_jobs, queue_state, replayed


class _StallingProxy(BaseHTTPRequestHandler):
    upstream = ""
    stalled: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = orjson.loads(raw) if raw else {}
        headers = {
            k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
        }
        content: bytes | Iterator[bytes] = raw
        if self.path.endswith("/lease") and "complete" in body and not _StallingProxy.stalled:
            _StallingProxy.stalled.append(self.path)

            def stalling() -> Iterator[bytes]:
                yield raw[: len(raw) // 2]
                time.sleep(2.5)  # the network stalls past the service's body timeout
                yield raw[len(raw) // 2 :]

            content = stalling()
        try:
            answer = httpx2.post(self.upstream + self.path, content=content, headers=headers,
                                 timeout=60)  # fmt: skip
        except httpx2.TransportError:
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


def test_a_completion_whose_upload_stalled_408_is_sent_again(
    database_url: URL, tmp_path: Path
) -> None:
    env = environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
        CAUSEWAY_BODY_TIMEOUT_S="1",
    )
    key = create_key(env, "acme", "admin,worker")
    with serving(env) as base:
        queue_jobs(base, key, "stall", 4)
        _StallingProxy.upstream, _StallingProxy.stalled = base, []
        proxy = ThreadingHTTPServer(("127.0.0.1", 0), _StallingProxy)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        try:

            def handler(lease: Lease) -> list[dict[str, Any]]:
                return [event(type="job.stall.done", data={"n": lease.trigger["data"]["n"]})]

            with Worker(f"http://127.0.0.1:{proxy.server_address[1]}", key, queue="stall",
                        name="w1", handler=handler, batch=2, wait_s=0.5, lease_s=60.0,
                        max_backoff_s=0.1) as worker:  # fmt: skip
                try:
                    stats = worker.run(until_idle=True)
                    error = None
                except Exception as exc:  # reported below
                    stats, error = worker.stats, exc
        finally:
            proxy.shutdown()
            proxy.server_close()
        assert _StallingProxy.stalled, "no completion was stalled"
        done = sorted(e["data"]["n"] for e in replayed(base, key, "job.stall.done"))
        state = queue_state(base, key, "stall")
        assert error is None, (
            f"run() raised {error!r}; results stored for {done} of [0, 1, 2, 3],"
            f" {state['in_flight']} tasks left leased; {stats}"
        )
        assert (stats.completed, stats.lost) == (4, 0), stats
