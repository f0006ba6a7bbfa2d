"""Database fixtures: one PostgreSQL server per session, a migrated template database,
and a fresh copy of it for every test that asks for ``database_url``.

The server is ``CAUSEWAY_TEST_DATABASE_URL`` when set, else an embedded one (pgserver)
in a temporary folder. pytest-postgresql's ``postgresql_proc`` is not used: ``initdb``
refuses to run as root, and CI runs as root.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from secrets import token_hex
from typing import Any

import pytest
from pytest_postgresql.janitor import DatabaseJanitor
from sqlalchemy import URL, make_url

from app.db.schema import upgrade_to_head


@pytest.fixture(scope="session")
def server() -> Iterator[URL]:
    configured = os.environ.get("CAUSEWAY_TEST_DATABASE_URL")
    if configured:
        yield make_url(configured).set(drivername="postgresql+psycopg")
        return
    from pgserver.postgres_server import get_server  # heavy: only when none is configured

    folder = tempfile.mkdtemp(prefix="causeway-pg-")
    embedded = get_server(folder, cleanup_mode="stop")
    try:
        yield make_url(embedded.get_uri()).set(drivername="postgresql+psycopg")
    finally:
        embedded.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


def janitor(server: URL, dbname: str, **options: Any) -> DatabaseJanitor:
    host = server.host or server.query.get("host")
    return DatabaseJanitor(
        user=server.username or "postgres",
        host=str(host),
        port=server.port or 5432,
        password=server.password,
        dbname=dbname,
        **options,
    )


def upgrade_loader(server: URL) -> Any:
    def load(host: str, port: int, user: str, dbname: str, password: str | None, **_: Any) -> None:
        upgrade_to_head(server.set(database=dbname))

    return load


@pytest.fixture(scope="session")
def template_db(server: URL) -> Iterator[str]:
    name = f"causeway_tmpl_{os.getpid()}"
    with janitor(server, name, as_template=True) as j:
        j.load(upgrade_loader(server))
        yield name


@pytest.fixture
def database_url(server: URL, template_db: str) -> Iterator[URL]:
    name = f"causeway_test_{token_hex(4)}"
    with janitor(server, name, template_dbname=template_db):
        yield server.set(database=name)
