"""Alembic environment: runs migrations online against one PostgreSQL database.

The URL comes from ``config.attributes["url"]`` (set by ``app.db.schema``) or else from
``CAUSEWAY_DATABASE_URL`` (plain ``alembic`` on the command line).
"""

from __future__ import annotations

import os
import sys
import time

from alembic import context
from sqlalchemy import Connection, create_engine, make_url, pool, text

from app.db.tables import metadata

config = context.config


def _url() -> str:
    url = config.attributes.get("url") or os.environ.get("CAUSEWAY_DATABASE_URL")
    if not url:
        raise SystemExit("set CAUSEWAY_DATABASE_URL, or run `causeway migrate`")
    return (
        make_url(str(url))
        .set(drivername="postgresql+psycopg")
        .render_as_string(hide_password=False)
    )


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


def run_migrations_online() -> None:
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        _lock_migrations(connection)
        context.configure(connection=connection, target_metadata=metadata)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()  # the session ends, and the lock with it


run_migrations_online()
