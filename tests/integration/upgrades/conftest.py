"""A store the release at revision 0017 wrote (``tests/data/upgrades/store_0017.sql``,
made by ``make_store_0017.py`` there under that release's code), and what that release
answered for its reads (``store_0017.json``). It is restored once into a template, and
migrated once into another: each test gets a copy of either (``old_store``,
``upgraded_store``), which PostgreSQL makes in a fraction of what a restore or a
``causeway migrate`` takes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from secrets import token_hex
from typing import Any

import orjson
import psycopg
import pytest
from fastapi import FastAPI
from sqlalchemy import URL

from app.db.schema import current_revision
from app.main import create_app, dispose
from app.settings import Settings
from tests.conftest import janitor
from tests.integration.process import environment

DATA = Path(__file__).resolve().parents[2] / "data" / "upgrades"
OLD = orjson.loads((DATA / "store_0017.json").read_bytes())


def libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def rows(url: URL, sql: str) -> list[dict[str, Any]]:
    with psycopg.connect(libpq(url)) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return list(cur.execute(sql.encode()).fetchall())


def migrate(url: URL, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = environment(
        CAUSEWAY_DATABASE_URL=url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
    )
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "migrate"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def cli(url: URL, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = environment(
        CAUSEWAY_DATABASE_URL=url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
    )
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _restore(server: URL) -> Any:
    """A janitor's loader: the 0017 store restored with psql."""

    def load(dbname: str, **_: Any) -> None:
        url = server.set(database=dbname)
        subprocess.run(
            [shutil.which("psql") or "psql", "-q", "-v", "ON_ERROR_STOP=1", "-f", str(DATA / "store_0017.sql"), libpq(url)],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        assert current_revision(url) == "0017"

    return load


def _restore_and_migrate(server: URL, folder: Path) -> Any:
    """A janitor's loader: the 0017 store restored, then ``causeway migrate`` run on it."""

    def load(dbname: str, **_: Any) -> None:
        _restore(server)(dbname)
        done = migrate(server.set(database=dbname), folder)
        assert done.returncode == 0, done.stderr[-800:]

    return load


@pytest.fixture(scope="session")
def restored_0017(server: URL, template_db: str) -> Iterator[str]:
    """A template holding the 0017 store (``template_db``: the server's roles exist)."""
    del template_db
    with janitor(server, f"causeway_up_{token_hex(4)}", as_template=True) as j:
        j.load(_restore(server))
        yield j.dbname


@pytest.fixture(scope="session")
def upgraded_0017(
    server: URL, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A template holding the 0017 store migrated to head by ``causeway migrate``."""
    del template_db
    with janitor(server, f"causeway_upped_{token_hex(4)}", as_template=True) as j:
        j.load(_restore_and_migrate(server, tmp_path_factory.mktemp("migrate")))
        yield j.dbname


@pytest.fixture
def old_store(server: URL, restored_0017: str) -> Iterator[URL]:
    """A copy of the 0017 store, not migrated."""
    name = f"causeway_up_{token_hex(4)}"
    with janitor(server, name, template_dbname=restored_0017):
        yield server.set(database=name)


@pytest.fixture
def upgraded_store(server: URL, upgraded_0017: str) -> Iterator[URL]:
    """A copy of the 0017 store after ``causeway migrate``."""
    name = f"causeway_up_{token_hex(4)}"
    with janitor(server, name, template_dbname=upgraded_0017):
        yield server.set(database=name)


@pytest.fixture
async def upgraded_app(upgraded_store: URL) -> AsyncIterator[FastAPI]:
    app = create_app(Settings(_env_file=None), database_url=upgraded_store)
    yield app
    await dispose(app)
