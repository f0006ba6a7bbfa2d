"""A refused upgrade leaves the database as it found it, and can be run again: 0020's
refusal came after the migrations before it had committed part of their work (0009
builds and drops indexes concurrently), leaving a database that said 0008 with 0009's
indexes, which the next migrate failed on. And /readyz on a database a newer release
migrated says what to do (not `causeway migrate`, which this release refuses there)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from secrets import token_hex

import httpx2
import psycopg
from alembic import command
from sqlalchemy import URL

from app.db.schema import alembic_config, current_revision, head_revision
from tests.conftest import janitor
from tests.integration.process import environment


def _libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def _migrate(url: URL, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = environment(
        CAUSEWAY_DATABASE_URL=url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
    )
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "migrate"],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def _indexes(url: URL) -> set[str]:
    with psycopg.connect(_libpq(url)) as conn:
        rows = conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'tasks'").fetchall()
    return {name for (name,) in rows}


def test_a_refused_upgrade_from_an_older_revision_leaves_it_whole_and_retryable(
    server: URL, tmp_path: Path
) -> None:
    """0020 refuses a store holding a 'storedtime' extension and says "keep running the
    release before". From 0008 (a release some users still run), the refusal must leave
    the database at 0008 as 0008 made it; and once the obstacle is gone (here: the event
    removed by hand), `causeway migrate` must reach head."""
    name = f"causeway_refused_{token_hex(4)}"
    with janitor(server, name):
        url = server.set(database=name)
        command.upgrade(alembic_config(url), "0008")
        before = _indexes(url)
        with psycopg.connect(_libpq(url)) as conn:
            conn.execute(
                "INSERT INTO events (tenant, position, id, source, type, stream, stream_version,"
                " recorded_at, extensions, prev_hash, hash) VALUES ('acme', 1, 'e', '/s', 't',"
                " '/s', 1, now(), '{\"storedtime\": \"x\"}', %s, %s)",
                (bytes(32), bytes(32)),
            )
        refused = _migrate(url, tmp_path)
        assert refused.returncode == 2, refused.stderr[-400:]
        assert current_revision(url) == "0008"
        # The schema is 0008's still: what the release before relies on.
        assert _indexes(url) == before, (
            f"revision says 0008 but tasks' indexes changed: {sorted(before ^ _indexes(url))}"
        )


def test_after_a_refused_upgrade_the_next_migrate_reaches_head(server: URL, tmp_path: Path) -> None:
    name = f"causeway_retried_{token_hex(4)}"
    with janitor(server, name):
        url = server.set(database=name)
        command.upgrade(alembic_config(url), "0008")
        with psycopg.connect(_libpq(url)) as conn:
            conn.execute(
                "INSERT INTO events (tenant, position, id, source, type, stream, stream_version,"
                " recorded_at, extensions, prev_hash, hash) VALUES ('acme', 1, 'e', '/s', 't',"
                " '/s', 1, now(), '{\"storedtime\": \"x\"}', %s, %s)",
                (bytes(32), bytes(32)),
            )
        assert _migrate(url, tmp_path).returncode == 2
        # The obstacle removed (an operator's repair; the trigger is bypassed as superuser).
        with psycopg.connect(_libpq(url)) as conn:
            conn.execute("SET session_replication_role = replica")
            conn.execute("DELETE FROM events")
        again = _migrate(url, tmp_path)
        assert again.returncode == 0, again.stderr.strip().splitlines()[-1:]
        assert current_revision(url) == head_revision()


async def test_readyz_on_a_revision_this_release_does_not_know(
    client: httpx2.AsyncClient, database_url: URL
) -> None:
    with psycopg.connect(
        database_url.set(drivername="postgresql").render_as_string(hide_password=False),
        autocommit=True,
    ) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099'")
    ready = await client.get("/readyz")
    assert ready.status_code == 503
    detail = ready.json()["detail"]
    assert "causeway migrate" not in detail, detail
