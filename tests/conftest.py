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
from hypothesis import settings
from pytest_postgresql.janitor import DatabaseJanitor
from sqlalchemy import URL, make_url

from app.db.schema import upgrade_to_head

# The suite's property tests draw the same examples every run and have no deadline: a
# run fails for the code, never for the draw or a slow moment of the machine. The long
# fuzz (``CAUSEWAY_FUZZ=long``, ``make fuzz``) draws afresh and keeps what it finds.
settings.register_profile(
    "causeway", deadline=None, derandomize=os.environ.get("CAUSEWAY_FUZZ") != "long"
)
settings.load_profile("causeway")


def pytest_configure(config: pytest.Config) -> None:
    """Run as root, pgserver runs its server as the system user ``pgserver``, and creates
    that user the first time. Each pytest-xdist worker starts a server of its own: on a
    machine without the user, two workers running ``useradd`` at once leave one worker's
    data folder owned by a user id that the other's ``useradd`` replaced, and that
    worker's ``initdb`` is refused ("Permission denied"). So the user is made here, once,
    before any worker starts (this hook runs in the controlling process first)."""
    if os.environ.get("CAUSEWAY_TEST_DATABASE_URL") or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if os.name == "posix" and os.geteuid() == 0:
        from pgserver.utils import ensure_user_exists

        ensure_user_exists("pgserver")


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
