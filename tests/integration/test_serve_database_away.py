"""``causeway serve`` while its database stops answering (a partition, a frozen host:
connections stay open, no byte comes back), a real serve behind a TCP proxy. From a
review: ``GET /readyz`` hung instead of answering 503 (and held a pooled connection each
time); after SIGTERM the process ran some 20 s past CAUSEWAY_SHUTDOWN_TIMEOUT_S, its
background tasks cut one after another, each waiting out the driver's cancel; and a
readiness probe in flight at SIGTERM kept it running as long."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
import pytest
from sqlalchemy import URL

from tests.integration.dbproxy import DbProxy
from tests.integration.process import create_key, environment, free_port


@pytest.fixture
def proxy(database_url: URL) -> Iterator[DbProxy]:
    proxy = DbProxy(database_url)
    try:
        yield proxy
    finally:
        proxy.close()


def test_readyz_answers_503_when_the_database_stops_answering(
    proxy: DbProxy, database_url: URL, tmp_path: Path
) -> None:
    env = _through(proxy, database_url, tmp_path, CAUSEWAY_RUN_SCHEDULER="false")
    with _serving(env, tmp_path / "serve.log", proxy) as (_, base):
        proxy.set("freeze")  # the database host stops answering (packets dropped)
        assert httpx2.get(f"{base}/healthz", timeout=5).status_code == 200
        started = time.monotonic()
        try:
            answer = httpx2.get(f"{base}/readyz", timeout=20)
        except httpx2.TimeoutException:
            pytest.fail(f"GET /readyz gave no answer in {time.monotonic() - started:.0f} s")
        assert answer.status_code == 503
        assert answer.headers["content-type"] == "application/problem+json"


def test_sigterm_ends_serve_within_the_shutdown_timeout_while_the_database_is_away(
    proxy: DbProxy, database_url: URL, tmp_path: Path
) -> None:
    """README: after SIGTERM, serve lets what still runs go on for
    CAUSEWAY_SHUTDOWN_TIMEOUT_S, 'before it cuts it and exits', so that a process manager
    that kills after 30 s sees it end by itself: with the database host gone quiet and
    no request in flight, it took some 20 s more (with the default 25 s, Kubernetes
    SIGKILLs it)."""
    env = _through(proxy, database_url, tmp_path, CAUSEWAY_SHUTDOWN_TIMEOUT_S="2")
    log = tmp_path / "serve.log"
    with _serving(env, log, proxy) as (process, _):
        time.sleep(2)  # the projections, the scheduler and the relay are at work
        proxy.set("freeze")
        time.sleep(2)
        code, _ = _stopped(process)
    assert code == 143, f"10 s after SIGTERM serve still ran; its log:\n{log.read_text()[-2500:]}"


def test_sigterm_during_a_readyz_probe_on_a_silent_database_ends_within_the_bound(
    proxy: DbProxy, database_url: URL, tmp_path: Path
) -> None:
    """A readiness probe in flight at SIGTERM (a kubelet probes every few seconds): its
    read, shielded from the probe's bound, was left running when the server cut the probe,
    and the process's last clean-up waited out the driver's cancel."""
    env = _through(
        proxy, database_url, tmp_path, CAUSEWAY_SHUTDOWN_TIMEOUT_S="2",
        CAUSEWAY_RUN_SCHEDULER="false", CAUSEWAY_RUN_PROJECTIONS="false",
    )  # fmt: skip
    log = tmp_path / "serve.log"
    with _serving(env, log, proxy) as (process, base):
        with ThreadPoolExecutor(4) as pool:  # idle pooled connections, as in service
            warm = list(pool.map(lambda _: httpx2.get(f"{base}/readyz", timeout=10), range(8)))
        assert [r.status_code for r in warm] == [200] * 8
        proxy.set("freeze")
        time.sleep(1)
        threading.Thread(target=lambda: _quiet_get(f"{base}/readyz"), daemon=True).start()
        time.sleep(0.5)  # the probe waits on the database
        code, took = _stopped(process)
    assert code == 143, log.read_text()[-2500:]
    assert took < 10, f"serve ended {took:.1f} s after SIGTERM (shutdown timeout 2 s)"


def test_serve_on_a_database_host_that_never_answers_says_so_and_exits(
    proxy: DbProxy, database_url: URL, tmp_path: Path
) -> None:
    """A host that takes the connection and says nothing (a frozen host, a proxy in front
    of a partition): serve waited there for ever, with no word (so did migrate and
    verify, from a timer). libpq's connect timeout ends it: one line, exit 2."""
    proxy.set("freeze")
    env = _through(proxy, database_url, tmp_path)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(free_port())],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "error: cannot use the database: connection timeout expired"
    )
    assert took < 30, f"serve gave up after {took:.0f} s"


@pytest.mark.parametrize("outage", ["refuse", "freeze"])
def test_metrics_answer_the_process_figures_while_the_database_is_away(
    proxy: DbProxy, database_url: URL, tmp_path: Path, outage: str
) -> None:
    """A scrape read the queue and lag gauges in the database, and failed whole while it
    was away (503, or no answer from a silent host): the process's own counters (requests,
    5xx, appends) were lost to Prometheus for as long as the outage, when they are wanted
    most. The scrape now answers them, without the database's gauges, saying so in
    ``causeway_metrics_database_up``."""
    env = _through(proxy, database_url, tmp_path, CAUSEWAY_KEY_CACHE_TTL_S="1")
    key = create_key(env, "acme", "read")
    scrape = {"Authorization": f"Bearer {key}"}
    with _serving(env, tmp_path / "serve.log", proxy) as (_, base):
        before = httpx2.get(f"{base}/metrics", headers=scrape, timeout=10)
        assert before.status_code == 200, before.text
        assert "causeway_metrics_database_up 1.0" in before.text
        assert "causeway_projection_lag_events{" in before.text
        proxy.set(outage)
        time.sleep(1.5)  # past the key cache's time to live: the key is looked up again
        started = time.monotonic()
        during = httpx2.get(f"{base}/metrics", headers=scrape, timeout=30)
        took = time.monotonic() - started
        assert during.status_code == 200, during.text
        assert "causeway_metrics_database_up 0.0" in during.text
        assert "causeway_http_request_duration_seconds_count{" in during.text  # its own
        assert "causeway_projection_lag_events{" not in during.text  # not read
        assert took < 8, f"the scrape took {took:.1f} s"
        # An unknown key is still refused: only a key checked before passes meanwhile.
        stranger = httpx2.get(
            f"{base}/metrics", headers={"Authorization": "Bearer cw_x_y"}, timeout=30
        )
        assert stranger.status_code in (401, 503), stranger.text


def _through(proxy: DbProxy, database_url: URL, tmp_path: Path, **more: str) -> dict[str, str]:
    """The environment of a serve whose database is reached through ``proxy``."""
    url = proxy.url(database_url).render_as_string(hide_password=False)
    return environment(CAUSEWAY_DATABASE_URL=url, CAUSEWAY_DATA_DIR=str(tmp_path), **more)


@contextlib.contextmanager
def _serving(
    env: dict[str, str], log: Path, proxy: DbProxy
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``causeway serve`` on ``env``, its output in ``log``, once it is ready, and its
    URL; at the end the database answers again and the process is gone."""
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
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log.read_text()
            with contextlib.suppress(httpx2.TransportError):
                if httpx2.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, "serve did not start"
            time.sleep(0.2)
        yield process, base
    finally:
        proxy.set("forward")
        if process.poll() is None:
            process.kill()
            process.wait(10)


def _stopped(process: subprocess.Popen[bytes]) -> tuple[int | None, float]:
    """SIGTERM: the exit code (None: still running 10 s later), and how long it took."""
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        code = None
    return code, time.monotonic() - started


def _quiet_get(url: str) -> None:
    with contextlib.suppress(httpx2.HTTPError):
        httpx2.get(url, timeout=30)
