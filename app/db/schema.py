"""Alembic, driven from code: upgrade to head, and tell whether a database is at head.

``migrations/`` holds the versions; ``alembic.ini`` at the repository root points there
too, so ``alembic upgrade head`` and ``causeway migrate`` do the same thing.
"""

from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import URL, Connection, create_engine
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.engine import bounded

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def sync_url(url: str | URL) -> URL:
    return bounded(url).set(drivername="postgresql+psycopg")  # with a connect timeout


def alembic_config(url: str | URL) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["url"] = sync_url(url)
    return config


def upgrade_to_head(url: str | URL) -> None:
    command.upgrade(alembic_config(url), "head")


def is_known_revision(revision: str) -> bool:
    """Whether ``revision`` is one of this release's migrations (a database restored from
    a newer release's dump is at one it does not know)."""
    try:
        return (
            ScriptDirectory.from_config(alembic_config("postgresql://")).get_revision(revision)
            is not None
        )
    except CommandError:  # ResolutionError is one: "Can't locate revision ..."
        return False


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("postgresql://")).get_current_head()


def schema_problem(url: str | URL, advice: str) -> str | None:
    """Why the database at ``url`` cannot be used by this release (its schema not at the
    head, or at a revision a newer release made), in one line ending in ``advice`` when
    migrating helps; None when it is at the head. A database that does not answer raises
    the driver's error (``app.store.failures.connection_problem`` words it)."""
    revision, head = current_revision(url), head_revision()
    if revision is not None and not is_known_revision(revision):
        return (
            f"the database schema is at revision {revision}, which this release of Causeway "
            "does not know (a newer release made it): run that release, or a newer one"
        )
    if revision != head:
        return f"the database schema is at revision {revision}, not {head}; {advice}"
    return None


def current_revision(url: str | URL) -> str | None:
    engine = create_engine(sync_url(url), poolclass=None)
    try:
        with engine.connect() as conn:
            return _revision_of(conn)
    finally:
        engine.dispose()


async def fetch_revision(conn: AsyncConnection) -> str | None:
    return await conn.run_sync(_revision_of)


def _revision_of(conn: Connection) -> str | None:
    """The revision ``conn``'s database is at. Alembic's context says at INFO which
    dialect it found each time one is made: a look at the revision (a refusal to serve, a
    health check) is no migration, and says nothing."""
    migration_log = logging.getLogger("alembic.runtime.migration")
    level = migration_log.level
    migration_log.setLevel(logging.WARNING)
    try:
        return MigrationContext.configure(conn).get_current_revision()
    finally:
        migration_log.setLevel(level)
