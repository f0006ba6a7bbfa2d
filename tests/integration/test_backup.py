"""Backup and restore as docs/operations.md tells it: ``pg_dump`` of a live store,
``pg_restore`` into a fresh database, ``causeway verify`` against the anchors kept before
the dump, and the restored store served, read and written to."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from secrets import token_hex

import httpx2
import orjson
import pgserver
import psycopg
import pytest
from sqlalchemy import URL

from app.db.engine import create_engine
from app.store.log import EventLog
from app.store.records import NewEvent
from tests.conftest import janitor
from tests.integration.process import create_key, environment, serving


def client_tools(server: URL) -> Path:
    """A folder with ``pg_dump`` and ``pg_restore`` at least as new as ``server`` (an older
    ``pg_dump`` refuses a newer server): the embedded PostgreSQL's, or the system's."""
    libpq = server.set(drivername="postgresql", database="postgres")
    with psycopg.connect(libpq.render_as_string(hide_password=False)) as conn:
        major = conn.info.server_version // 10_000
    candidates = [Path(pgserver.__file__).parent / "pginstall" / "bin"]
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for folder in candidates:
        tool = folder / "pg_dump"
        if tool.exists():
            version = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
            found = re.search(r"(\d+)\.\d+", version)
            if found and int(found[1]) >= major:
                return folder
    raise AssertionError(f"no pg_dump for PostgreSQL {major} among {candidates}")


@pytest.fixture
def restored(server: URL) -> Iterator[URL]:
    name = f"causeway_restored_{token_hex(4)}"
    with janitor(server, name):
        yield server.set(database=name)


async def append(url: URL, tenant: str, count: int) -> None:
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.begin() as conn:
            events = [NewEvent(id=f"e{n}", source="/s", type="t", stream="s") for n in range(count)]
            await EventLog(conn).append(tenant, events)
    finally:
        await engine.dispose()


def libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def test_a_dump_restored_into_a_fresh_database_verifies_against_the_old_anchors_and_serves(
    server: URL, database_url: URL, restored: URL, tmp_path: Path
) -> None:
    live = environment(CAUSEWAY_DATABASE_URL=libpq(database_url))
    key = create_key(live, "acme", "ingest,read")
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/cloudevents+json"}
    asyncio.run(append(database_url, "acme", 5))
    anchors = tmp_path / "anchors.log"
    cli = [sys.executable, "-m", "app.cli"]
    subprocess.run([*cli, "anchor", str(anchors)], env=live, check=True, capture_output=True)

    tools = client_tools(server)
    dump = tmp_path / "causeway.dump"
    subprocess.run(
        [tools / "pg_dump", "--format=custom", f"--file={dump}", libpq(database_url)], check=True
    )
    subprocess.run(
        [
            tools / "pg_restore",
            "--no-owner",
            "--exit-on-error",
            f"--dbname={libpq(restored)}",
            dump,
        ],
        check=True,
    )

    copy = environment(CAUSEWAY_DATABASE_URL=libpq(restored))
    verified = subprocess.run(
        [*cli, "verify", "--anchors", str(anchors)], env=copy, capture_output=True, text=True
    )
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith("ok: 5 events")
    with serving(copy) as base:  # the keys came along; the chain goes on where it stopped
        assert httpx2.get(f"{base}/events/e4", headers=headers).json()["position"] == 5
        event = {"specversion": "1.0", "id": "e5", "source": "/s", "type": "t"}
        answer = httpx2.post(f"{base}/events", content=orjson.dumps(event), headers=headers)
        assert answer.status_code == 201, answer.text
        assert answer.json()["events"][0]["position"] == 6
    verified = subprocess.run([*cli, "verify"], env=copy, capture_output=True, text=True)
    assert verified.stdout.startswith("ok: 6 events"), verified.stderr
