"""A PostgreSQL primary and a streaming replica of it, started by a test on loopback ports
chosen at run time, from the PostgreSQL binaries on the machine (``pg_basebackup -R``).

Run as root (as in CI), the servers run as the system user ``pgserver`` (which pgserver
makes for the embedded server too): ``initdb`` and ``postgres`` refuse root.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from tests.integration.process import free_port

_USER = "pgserver"


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_basebackup"))
    return Path(found[-1]).parent if found else None


class Server:
    """One PostgreSQL server in ``folder``, on ``port``."""

    def __init__(self, pair: Pair, folder: Path, port: int) -> None:
        self._pair = pair
        self.folder = folder
        self.port = port

    def url(self, database: str = "causeway") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        self._pair.run("pg_ctl", "-D", str(self.folder), "-l", str(self.folder) + ".log",
                       "-w", "-t", "30", "start")  # fmt: skip

    def stop(self) -> None:
        self._pair.run("pg_ctl", "-D", str(self.folder), "-m", "fast", "-w", "stop")

    def execute(self, sql: str, database: str = "causeway") -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url(database), autocommit=True) as conn:
            cursor = conn.execute(sql)
            return cursor.fetchall() if cursor.description else []


class Pair:
    """A primary, its database ``causeway``, and a streaming replica of it."""

    def __init__(self, binaries: Path, root: Path) -> None:
        self._binaries = binaries
        self._root = root
        self.primary = Server(self, root / "primary", free_port())
        self.replica = Server(self, root / "replica", free_port())

    def run(self, program: str, *args: str) -> None:
        user = _USER if os.geteuid() == 0 else None
        subprocess.run(
            [str(self._binaries / program), *args],
            check=True,
            capture_output=True,
            user=user,
            timeout=60,
            cwd=self._root,
        )

    def create(self) -> None:
        primary = self.primary
        self.run("initdb", "-D", str(primary.folder), "-U", "postgres", "--auth=trust", "-N")
        with (primary.folder / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {primary.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self._root}'\nfsync = off\n"
                "max_connections = 100\nwal_level = replica\n"
            )
        primary.start()
        primary.execute("CREATE DATABASE causeway", database="postgres")
        # -R: standby.signal and primary_conninfo; the copy is made in a folder the tool
        # creates itself (0700: a standby refuses a folder others may read).
        self.run("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                 "-D", str(self.replica.folder), "-R", "-X", "stream", "-c", "fast")  # fmt: skip
        with (self.replica.folder / "postgresql.conf").open("a") as conf:
            conf.write(f"port = {self.replica.port}\n")
        self.replica.start()

    def wait_for_replay(self, timeout_s: float = 10.0) -> None:
        """Until the replica has replayed everything the primary has written so far."""
        [(lsn,)] = self.primary.execute("SELECT pg_current_wal_lsn()::text")
        deadline = time.monotonic() + timeout_s
        while True:
            [(done,)] = self.replica.execute(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn")
            if done:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the replica did not replay up to {lsn}")
            time.sleep(0.02)

    def stop(self) -> None:
        for server in (self.replica, self.primary):
            if (server.folder / "postmaster.pid").exists():
                subprocess.run(
                    [str(self._binaries / "pg_ctl"), "-D", str(server.folder), "-m",
                     "immediate", "-w", "stop"],
                    capture_output=True,
                    user=_USER if os.geteuid() == 0 else None,
                    timeout=60,
                    check=False,
                )  # fmt: skip


@contextmanager
def streaming_pair() -> Iterator[Pair]:
    """A primary and its streaming replica, both stopped and removed at the end."""
    binaries = _binaries()
    if binaries is None:
        raise RuntimeError("no PostgreSQL binaries (pg_basebackup) under /usr/lib/postgresql")
    if os.geteuid() == 0:
        from pgserver.utils import ensure_user_exists

        ensure_user_exists(_USER)
    root = Path(tempfile.mkdtemp(prefix="causeway-replica-"))
    if os.geteuid() == 0:
        shutil.chown(root, _USER, _USER)
    pair = Pair(binaries, root)
    try:
        pair.create()
        yield pair
    finally:
        pair.stop()
        shutil.rmtree(root, ignore_errors=True)
