"""``causeway serve`` while its database stops answering (a partition, a frozen host:
connections stay open, no byte comes back), a real serve behind a TCP proxy. From a
review: ``GET /readyz`` hung instead of answering 503 (and held a pooled connection each
time); after SIGTERM the process ran some 20 s past CAUSEWAY_SHUTDOWN_TIMEOUT_S, its
background tasks cut one after another, each waiting out the driver's cancel."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
import pytest
from sqlalchemy import URL

from tests.integration.dbproxy import DbProxy
from tests.integration.process import environment, free_port, serving


def test_readyz_answers_503_when_the_database_stops_answering(
    database_url: URL, tmp_path: Path
) -> None:
    proxy = DbProxy(database_url)
    try:
        url = database_url.set(host="127.0.0.1", port=proxy.port)
        env = environment(
            CAUSEWAY_DATABASE_URL=url.render_as_string(hide_password=False),
            CAUSEWAY_DATA_DIR=str(tmp_path),
            CAUSEWAY_RUN_SCHEDULER="false",
        )
        with serving(env) as base:
            assert httpx2.get(f"{base}/readyz", timeout=10).status_code == 200
            proxy.set("freeze")  # the database host stops answering (packets dropped)
            try:
                assert httpx2.get(f"{base}/healthz", timeout=5).status_code == 200
                started = time.monotonic()
                try:
                    answer = httpx2.get(f"{base}/readyz", timeout=20)
                except httpx2.TimeoutException:
                    pytest.fail(
                        f"GET /readyz gave no answer in {time.monotonic() - started:.0f} s "
                        "while the database did not answer (expected 503 'the database is "
                        "unreachable')"
                    )
                assert answer.status_code == 503
                assert answer.headers["content-type"] == "application/problem+json"
            finally:
                proxy.set("forward")  # so that the server can stop
    finally:
        proxy.close()


def test_sigterm_ends_serve_within_the_shutdown_timeout_while_the_database_is_away(
    database_url: URL, tmp_path: Path
) -> None:
    """README: after SIGTERM, serve lets what still runs go on for
    CAUSEWAY_SHUTDOWN_TIMEOUT_S, 'before it cuts it and exits', so that a process manager
    that kills after 30 s sees it end by itself. With the database host gone quiet and
    no request in flight, the app's shutdown takes some 20 s more (each background task
    cut in a query waits out psycopg's 5 s cancel and 5 s wait, one task after another):
    with the default 25 s, Kubernetes SIGKILLs it."""
    proxy = DbProxy(database_url)
    log = tmp_path / "serve.log"
    try:
        url = database_url.set(host="127.0.0.1", port=proxy.port)
        env = environment(
            CAUSEWAY_DATABASE_URL=url.render_as_string(hide_password=False),
            CAUSEWAY_DATA_DIR=str(tmp_path),
            CAUSEWAY_SHUTDOWN_TIMEOUT_S="2",
        )
        port = free_port()
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 60
            while True:
                assert process.poll() is None, log.read_text()
                try:
                    if httpx2.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                        break
                except httpx2.TransportError:
                    pass
                assert time.monotonic() < deadline, "serve did not start"
                time.sleep(0.2)
            time.sleep(2)  # the projections, the scheduler and the relay are at work
            proxy.set("freeze")
            time.sleep(2)
            process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                code = None
            assert code == 143, (
                f"10 s after SIGTERM (shutdown timeout 2 s) serve still runs; its log:\n"
                f"{log.read_text()[-2500:]}"
            )
        finally:
            proxy.set("forward")
            if process.poll() is None:
                process.kill()
                process.wait(10)
    finally:
        proxy.close()


def test_sigterm_during_a_readyz_probe_on_a_silent_database_ends_within_the_bound(
    database_url: URL, tmp_path: Path
) -> None:
    """A readiness probe in flight at SIGTERM (a kubelet probes every few seconds): its
    read, shielded from the probe's bound, was left running when the server cut the probe,
    and the process's last clean-up waited out the driver's cancel (from a review)."""
    proxy = DbProxy(database_url)
    log = tmp_path / "serve.log"
    try:
        url = database_url.set(host="127.0.0.1", port=proxy.port)
        env = environment(
            CAUSEWAY_DATABASE_URL=url.render_as_string(hide_password=False),
            CAUSEWAY_DATA_DIR=str(tmp_path),
            CAUSEWAY_SHUTDOWN_TIMEOUT_S="2",
            CAUSEWAY_RUN_SCHEDULER="false",
            CAUSEWAY_RUN_PROJECTIONS="false",
        )
        port = free_port()
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        base = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(process, base, log)
            with ThreadPoolExecutor(4) as pool:  # idle pooled connections, as in service
                warm = list(pool.map(lambda _: httpx2.get(f"{base}/readyz", timeout=10), range(8)))
            assert [r.status_code for r in warm] == [200] * 8
            proxy.set("freeze")
            time.sleep(1)
            probe = threading.Thread(target=lambda: _quiet_get(f"{base}/readyz"), daemon=True)
            probe.start()
            time.sleep(0.5)  # the probe waits on the database
            started = time.monotonic()
            process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                code = None
            took = time.monotonic() - started
        finally:
            proxy.set("forward")
            if process.poll() is None:
                process.kill()
                process.wait(10)
        assert code == 143, log.read_text()[-2500:]
        assert took < 10, f"serve ended {took:.1f} s after SIGTERM (shutdown timeout 2 s)"
    finally:
        proxy.close()


def _wait_ready(process: subprocess.Popen[bytes], base: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, log.read_text()
        try:
            if httpx2.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        assert time.monotonic() < deadline, "serve did not start"
        time.sleep(0.2)


def _quiet_get(url: str) -> None:
    with contextlib.suppress(httpx2.HTTPError):
        httpx2.get(url, timeout=30)
