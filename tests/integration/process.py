"""Running ``causeway`` as a real process, for tests that need one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def environment(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUSEWAY_")}
    env.update(values)
    return env


@contextmanager
def serving(
    env: dict[str, str], *args: str, timeout_s: float = 60, output: Path | None = None
) -> Iterator[str]:
    """``causeway serve`` on a free port until the block ends; what it prints goes to
    ``output`` when given."""
    port = free_port()
    sink = output.open("wb") if output is not None else subprocess.PIPE
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port), *args],
        env=env,
        stdout=sink,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                said = process.stdout.read().decode() if process.stdout else ""
                raise AssertionError(f"serve exited with {process.returncode}:\n{said}")
            try:
                if httpx2.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("serve did not answer in time")
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stdout:
            process.stdout.close()
        if not isinstance(sink, int):
            sink.close()


def create_key(env: dict[str, str], tenant: str, scopes: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "keys", "create", "--tenant", tenant, "--scopes", scopes],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()
