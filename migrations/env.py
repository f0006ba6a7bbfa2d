"""Alembic environment: runs migrations online against one PostgreSQL database.

The URL comes from ``config.attributes["url"]`` (set by ``app.db.schema``) or else from
``CAUSEWAY_DATABASE_URL`` (plain ``alembic`` on the command line).
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine, make_url, pool

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


def run_migrations_online() -> None:
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=metadata)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()
