"""Real ``nats-server`` processes with JetStream for the relay's tests: one server, or a
cluster of three, on free loopback ports, each with its own store folder, stopped when
the block ends (also on failure)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest

from tests.integration.process import free_port

NATS_SERVER = shutil.which("nats-server")
needs_nats = pytest.mark.skipif(NATS_SERVER is None, reason="nats-server is not installed")


@dataclass
class Node:
    name: str
    port: int
    cluster_port: int
    http_port: int
    config: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.config.with_suffix(".log")

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"


class NodeFailed(AssertionError):
    """A node did not come up."""


class Nats:
    def __init__(self, folder: Path, size: int, extra: tuple[str, ...] = ()) -> None:
        self.nodes = [
            Node(f"n{i}", free_port(), free_port(), free_port(), folder / f"n{i}.conf")
            for i in range(size)
        ]
        for node in self.nodes:
            lines = [
                f"server_name: {node.name}",
                f"listen: 127.0.0.1:{node.port}",
                f"http: 127.0.0.1:{node.http_port}",
                f'jetstream {{ store_dir: "{folder / node.name}" }}',
                *extra,
            ]
            if size > 1:
                routes = ", ".join(
                    f"nats://127.0.0.1:{o.cluster_port}" for o in self.nodes if o is not node
                )
                lines.append(
                    f"cluster {{ name: causeway-test, listen: 127.0.0.1:{node.cluster_port}, "
                    f"routes: [{routes}] }}"
                )
            node.config.write_text("\n".join(lines) + "\n")

    @property
    def url(self) -> str:
        return ",".join(n.url for n in self.nodes)

    def start(self, index: int | None = None) -> None:
        for node in self.nodes if index is None else [self.nodes[index]]:
            assert NATS_SERVER is not None
            with node.log.open("ab") as log:
                node.process = subprocess.Popen(
                    [NATS_SERVER, "-c", str(node.config)], stdout=log, stderr=subprocess.STDOUT
                )
        self.wait_ready()

    def wait_ready(self, timeout_s: float = 60) -> None:
        """Until every running node says its JetStream is healthy (in a cluster: it has
        a meta leader); a node that exits or stays unhealthy fails with its log's end."""
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            if node.process is None:
                continue
            while True:
                if node.process.poll() is not None:
                    raise NodeFailed(f"nats-server {node.name} exited: {node.log_tail()}")
                try:
                    answer = httpx2.get(f"http://127.0.0.1:{node.http_port}/healthz", timeout=1)
                    if answer.status_code == 200:
                        break
                except httpx2.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise NodeFailed(f"nats-server {node.name} is not healthy: {node.log_tail()}")
                time.sleep(0.1)

    def kill(self, index: int) -> None:
        node = self.nodes[index]
        if node.process is not None:
            node.process.kill()
            node.process.wait()
            node.process = None

    def pause(self) -> None:
        """Every node stops answering (SIGSTOP): clients see a server that hangs."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                os.kill(node.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                os.kill(node.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        self.resume()
        for index in range(len(self.nodes)):
            self.kill(index)


@contextmanager
def nats_servers(size: int = 1, *extra: str) -> Iterator[Nats]:
    """``extra``: lines added to every node's configuration.

    A first start that fails (a port taken between its choice and the server's bind, by
    another test's server) is tried again on fresh ports, twice at most.
    """
    for attempt in range(3):
        folder = Path(tempfile.mkdtemp(prefix="causeway-nats-"))
        servers = Nats(folder, size, extra)
        try:
            servers.start()
            break
        except NodeFailed:
            servers.stop()
            shutil.rmtree(folder, ignore_errors=True)
            if attempt == 2:
                raise
    try:
        yield servers
    finally:
        servers.stop()
        shutil.rmtree(folder, ignore_errors=True)
