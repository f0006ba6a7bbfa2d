"""What the benchmarks share: a database to build in, a served Causeway, and the table."""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import psycopg
from sqlalchemy import URL, make_url

from app.db.embedded import EmbeddedPostgres
from app.db.engine import libpq_conninfo
from app.db.schema import upgrade_to_head

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def bench_server() -> Iterator[URL]:
    """``CAUSEWAY_BENCH_DATABASE_URL`` (a server to create databases on), else the
    embedded PostgreSQL under ``.causeway/bench``."""
    configured = os.environ.get("CAUSEWAY_BENCH_DATABASE_URL")
    if configured:
        yield make_url(configured)
        return
    embedded = EmbeddedPostgres(ROOT / ".causeway" / "bench")
    try:
        yield embedded.start()
    finally:
        embedded.stop()


def ensure_database(server: URL, name: str, *, fresh: bool) -> tuple[URL, bool]:
    """The database ``name`` on ``server``, migrated; and whether it already existed."""
    with psycopg.connect(libpq_conninfo(server.set(database="postgres")), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists and fresh:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            exists = None
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
    url = server.set(database=name)
    upgrade_to_head(url)
    return url, exists is not None


def stored_events(
    server: URL, name: str, total: int, build: Callable[[URL], Coroutine[Any, Any, None]]
) -> tuple[URL, bool]:
    """The database ``name`` holding the ``total`` events ``build`` appends (and the one
    registration before them): kept from an earlier run when it holds exactly that many,
    else built afresh. The URL, and whether it was built now."""
    url, existed = ensure_database(server, name, fresh=False)
    with psycopg.connect(libpq_conninfo(url)) as conn:
        stored = conn.execute("SELECT count(*) FROM events").fetchone()
    if existed and stored and stored[0] == total + 1:
        return url, False
    url, _ = ensure_database(server, name, fresh=True)
    print(f"building a store of {total:,} events")
    asyncio.run(build(url))
    return url, True


def checkpoint(url: URL) -> None:
    """Write out what earlier phases left dirty, so that no phase pays for the last one's
    writes (a fresh database, a dropped table, the other contender's rows)."""
    with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True, slots=True)
class Served:
    base: str
    pid: int

    def peak_rss_mb(self) -> float:
        """The server process's peak resident memory (Linux ``VmHWM``), in MiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")


_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int, *, with_exited_children: bool = False) -> float:
    """User and system CPU of ``pid`` (Linux ``/proc``); with the CPU of its children
    that exited and were waited for. 0 for a process that is gone: a child's CPU then
    counts in its parent's."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):  # gone before, or while, it was read
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if with_exited_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _TICKS


def _process_tree(pid: int) -> list[int]:
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):  # it exited meanwhile
            continue
    return found


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """CPU seconds: a server's processes, PostgreSQL's, and the bench process's own (the
    load generator; for a library, the library itself)."""

    server: float
    database: float
    client: float

    def __sub__(self, other: CpuTimes) -> CpuTimes:
        return CpuTimes(
            self.server - other.server, self.database - other.database, self.client - other.client
        )

    def __add__(self, other: CpuTimes) -> CpuTimes:
        return CpuTimes(
            self.server + other.server, self.database + other.database, self.client + other.client
        )


NO_CPU = CpuTimes(0.0, 0.0, 0.0)


class CpuMeter:
    """Reads ``CpuTimes`` off ``/proc``: where the cores went, so that a rate can be set
    against what the machine could give. PostgreSQL is its postmaster and every process
    under it (backends that exited count through the postmaster). On a database that is
    not on this machine its figure is NaN."""

    def __init__(self, url: URL) -> None:
        self._postmaster: int | None = None
        # Read while the connection is open: its backend exits when it closes.
        with psycopg.connect(libpq_conninfo(url)) as conn:
            try:
                status = Path(f"/proc/{conn.info.backend_pid}/status").read_text()
            except (FileNotFoundError, ProcessLookupError):  # a server on another machine
                status = ""
        for line in status.splitlines():
            if line.startswith("PPid:"):
                self._postmaster = int(line.split()[1])

    def read(self, server_pid: int | None = None) -> CpuTimes:
        server = 0.0
        if server_pid is not None:
            server = sum(_cpu_seconds(p) for p in _process_tree(server_pid))
        database = float("nan")
        if self._postmaster is not None:
            database = _cpu_seconds(self._postmaster, with_exited_children=True) + sum(
                _cpu_seconds(p) for p in _process_tree(self._postmaster)[1:]
            )
        return CpuTimes(server, database, time.process_time())

    @staticmethod
    def cores() -> int:
        return len(os.sched_getaffinity(0))


@contextmanager
def serving(url: URL, *, workers: int = 1) -> Iterator[str]:
    """A real ``causeway serve`` on ``url`` (``workers`` processes); yields its base URL."""
    with served(url, workers=workers) as server:
        yield server.base


@contextmanager
def served(
    url: URL, *, workers: int = 1, extra_env: dict[str, str] | None = None
) -> Iterator[Served]:
    """A real ``causeway serve`` on ``url`` (``workers`` processes), with its process id.
    Nothing of the bench's own environment named ``CAUSEWAY_*`` or ``OTEL_*`` reaches it;
    ``extra_env`` is added."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CAUSEWAY_", "OTEL_"))}
    env.update(extra_env or {})
    env["CAUSEWAY_DATABASE_URL"] = url.render_as_string(hide_password=False)
    env["CAUSEWAY_DB_POOL_SIZE"] = "10"
    env["CAUSEWAY_WORKERS"] = str(workers)
    with _running([sys.executable, "-m", "app.cli", "serve", "--port", str(port)], port, env) as s:
        yield s


@contextmanager
def serving_null_app() -> Iterator[str]:
    """``bench._null_app`` under uvicorn, as ``causeway serve`` runs its app; its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "bench._null_app:app", "--port", str(port)]
    command += ["--http", "httptools", "--ws", "none", "--no-access-log", "--log-level", "warning"]
    with _running(command, port) as served:
        yield served.base


@contextmanager
def _running(command: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[Served]:
    """``command``, a server on ``port``, once its ``/healthz`` answers 200."""
    process = subprocess.Popen(
        command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx2.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{' '.join(command)} did not start") from None
                time.sleep(0.2)
        yield Served(base, process.pid)
    finally:
        process.terminate()
        process.wait(timeout=30)


def settle(base: str, key: str, *, timeout_s: float = 1800) -> None:
    """Wait until the server's projections have caught up with the log: a fresh server on
    a big store first reads it (the dispatcher reads every event), and a benchmark
    measures the steady state, not that catch-up."""
    deadline = time.monotonic() + timeout_s
    with httpx2.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as client:
        while time.monotonic() < deadline:
            found = client.get("/projections").json()["projections"]
            if all(p["lag_events"] == 0 for p in found):
                return
            time.sleep(0.5)
    raise RuntimeError("the projections did not catch up in time")


@dataclass(frozen=True, slots=True)
class Row:
    figure: str
    causeway: float
    baseline: float | None
    unit: str
    higher_is_better: bool = True

    def ratio(self) -> str:
        if self.baseline is None or self.baseline == 0:
            return "-"
        return f"{self.causeway / self.baseline:.2f}x"


def print_table(title: str, rows: list[Row], baseline_name: str) -> None:
    print(f"\n{title}")
    header = f"| figure | Causeway | {baseline_name} | ratio |"
    print(header)
    print("|---|---|---|---|")
    for row in rows:
        base = "-" if row.baseline is None else f"{row.baseline:,.2f} {row.unit}"
        print(f"| {row.figure} | {row.causeway:,.2f} {row.unit} | {base} | {row.ratio()} |")


def percentile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]
