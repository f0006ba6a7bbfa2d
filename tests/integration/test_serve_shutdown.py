"""``causeway serve`` stopped as a process manager stops it, and one ``serve`` per
embedded database: SIGTERM while it starts stops the embedded PostgreSQL too (it ended the
process at once and left the server running), an open deployments watch no longer keeps
it running after SIGTERM (uvicorn waited for the client to leave), and a second ``serve``
on the same data folder is refused (it started on the same server and, stopping, removed
the first one's address file)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
from sqlalchemy import URL

from tests.integration.process import create_key, environment, free_port


def _start(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 120
    while True:
        assert process.poll() is None, log.read_text()
        try:
            if httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return process
        except httpx2.TransportError:
            pass
        assert time.monotonic() < deadline, "serve did not answer in time"
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _postmaster(data: Path) -> int | None:
    pid_file = data / "pg" / "postmaster.pid"
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int(pid_file.read_text().splitlines()[0])
        if _alive(pid):
            return pid
    return None


@contextlib.contextmanager
def _stops_postgres_at_the_end(data: Path) -> Iterator[None]:
    try:
        yield
    finally:
        pid = _postmaster(data)
        if pid is not None:  # fast shutdown of what the test left
            os.kill(pid, signal.SIGINT)
            deadline = time.monotonic() + 30
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)


def _end(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait(10)


def test_a_second_serve_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = environment(CAUSEWAY_DATA_DIR=str(data))
    log = tmp_path / "serve.log"
    with _stops_postgres_at_the_end(data):
        first = _start(env, free_port(), log)
        try:
            second = subprocess.run(
                [sys.executable, "-m", "app.cli", "serve", "--port", str(free_port())],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert second.returncode == 2, second.stderr
            assert second.stderr == (
                f"error: another causeway serve (pid {first.pid}) uses {data}: stop it, or "
                "give this one a CAUSEWAY_DATA_DIR of its own\n"
            )
            assert (data / "address").exists()  # the first one's, left as it was
        finally:
            assert _end(first) == 143


def test_sigterm_while_serve_starts_stops_the_embedded_postgres(tmp_path: Path) -> None:
    """SIGTERM while `serve` migrates the embedded database (a process manager stopping a
    unit that is still starting)."""
    data = tmp_path / "data"
    env = environment(CAUSEWAY_DATA_DIR=str(data))
    with _stops_postgres_at_the_end(data), (tmp_path / "serve.log").open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(free_port())],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        # PostgreSQL up and this process listed as its handle: `serve` is migrating now.
        while _postmaster(data) is None or not (data / "pg" / ".handle_pids.json").exists():
            assert process.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        code = process.wait(60)
        time.sleep(1)
        handles = data / "pg" / ".handle_pids.json"
        assert _postmaster(data) is None, (
            f"serve ended with {code}, PostgreSQL still runs; handles listed: "
            f"{handles.read_text() if handles.exists() else None}"
        )


def test_sigterm_with_a_deployment_watch_open_ends_the_process(
    database_url: URL, tmp_path: Path
) -> None:
    """A browser tab or a model server follows `GET /deployments/{service}/watch`
    (server-sent events) when SIGTERM comes: CAUSEWAY_SHUTDOWN_TIMEOUT_S later the
    service ends, exit 143."""
    url = database_url.render_as_string(hide_password=False)
    env = environment(
        CAUSEWAY_DATABASE_URL=url, CAUSEWAY_DATA_DIR=str(tmp_path), CAUSEWAY_SHUTDOWN_TIMEOUT_S="2"
    )
    key = create_key(env, "acme", "read")
    port = free_port()
    log = tmp_path / "serve.log"
    process = _start(env, port, log)
    opened = threading.Event()

    def follow() -> None:
        try:
            with httpx2.stream(
                "GET",
                f"http://127.0.0.1:{port}/deployments/svc/watch",
                headers={"Authorization": f"Bearer {key}"},
                timeout=120,
            ) as answer:
                for _ in answer.iter_bytes():
                    opened.set()
        except Exception:
            opened.set()

    watcher = threading.Thread(target=follow, daemon=True)
    watcher.start()
    try:
        assert opened.wait(10), "the watch did not start"
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 143, (
            f"20 s after SIGTERM serve still runs (exit {code}); its log:\n{log.read_text()[-1500:]}"
        )
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
