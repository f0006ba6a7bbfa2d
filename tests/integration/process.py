"""Running ``causeway`` as a real process, for tests that need one."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port free now, for a server a test starts next.

    Chosen below the kernel's ephemeral range, not with ``bind(0)``: a port from that
    range can be taken by any outgoing connection (a cluster's own routes, the suite's
    database connections) between this check and the server's bind, and the server then
    fails to start.
    """
    top = min(_ephemeral_start(), 65536)
    for _ in range(200):
        port = random.randrange(max(1024, top - 12000), top)  # noqa: S311 (not a secret)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free loopback port below the ephemeral range")


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
