"""Alembic environment: runs migrations online against one PostgreSQL database.

The URL comes from ``config.attributes["url"]`` (set by ``app.db.schema``) or else from
``CAUSEWAY_DATABASE_URL`` (plain ``alembic`` on the command line).
"""

from __future__ import annotations

import os
import sys
import time

from alembic import context
from alembic.script import ScriptDirectory
from sqlalchemy import URL, Connection, create_engine, make_url, pool, text

from app.db.tables import metadata

config = context.config


def _url() -> str:
    url = config.attributes.get("url") or os.environ.get("CAUSEWAY_DATABASE_URL")
    if not url:
        raise SystemExit("set CAUSEWAY_DATABASE_URL, or run `causeway migrate`")
    # A URL object (``app.db.schema.alembic_config``'s) as it is: str() of one masks its
    # password, and migrations logged in with "***".
    parsed = url if isinstance(url, URL) else make_url(str(url))
    return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


# One migration at a time per database: two `causeway migrate` (or `serve --migrate`)
# started together raced, and the second failed on the first's half-made objects (some
# migrations commit part-way). A session lock, held across those commits; the one that
# waited reads the revision after it, and finds nothing left to do.
_MIGRATION_LOCK = 0x63617573_6D696772  # "causmigr"


def _lock_migrations(connection: Connection) -> None:
    """Take the migration lock, trying again every half second rather than waiting in a
    statement: a statement waiting holds a snapshot, which a CREATE INDEX CONCURRENTLY of
    the migration holding the lock waits for (a deadlock)."""
    take = text("SELECT pg_try_advisory_lock(:key)")
    waited = False
    while not connection.execute(take, {"key": _MIGRATION_LOCK}).scalar():
        connection.commit()
        if not waited:
            sys.stderr.write("waiting for another migration of this database to end\n")
            waited = True
        time.sleep(0.5)
    connection.commit()  # the lock is the session's; the migrations begin their own


# Revisions whose ``refusal(connection)`` says, before any migration runs, why an upgrade
# through them cannot be made: a refusal inside the run came after the migrations before
# it had committed part of their work (some commit part-way: CREATE INDEX CONCURRENTLY),
# leaving a schema that was no revision's, and that the release before could not serve.
_REFUSING = ("0020",)


def _refuse_early(connection: Connection) -> None:
    try:
        current = context.get_context().get_current_revision()
        try:
            target = str(context.get_revision_argument() or "")
        except KeyError:  # no upgrade asked for (alembic check, current)
            return
        if current is None:
            return  # a fresh database: nothing stored to refuse
        scripts = ScriptDirectory.from_config(config)
        for revision in _REFUSING:
            if current < revision and (target.startswith("head") or target >= revision):
                script = scripts.get_revision(revision)
                if script is not None:
                    script.module.refusal(connection)
    finally:
        connection.commit()  # what was read: the migrations begin their own transactions


def run_migrations_online() -> None:
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        _lock_migrations(connection)
        # A transaction a migration: each one's stamp is committed with its work, so the
        # revision the database says is the schema it has, whatever fails after.
        context.configure(
            connection=connection, target_metadata=metadata, transaction_per_migration=True
        )
        _refuse_early(connection)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()  # the session ends, and the lock with it


run_migrations_online()
