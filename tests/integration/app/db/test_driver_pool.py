"""The walks' pool on a real PostgreSQL: what walks see when the server drops every
connection, as a restart does. (Its connections are named in pg_stat_activity.)"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from sqlalchemy import URL

from app.db.engine import DriverPool, libpq_conninfo

NAME = "causeway walks"


def backends(admin: psycopg.Connection[Any]) -> int:
    found = admin.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name = %s AND datname = current_database()",
        (NAME,),
    ).fetchone()
    return int(found[0]) if found else 0


async def test_a_restart_costs_no_walk(database_url: URL) -> None:
    """Every connection the restart broke is found at checkout (its first statement) and
    replaced, the others checked then: no walk fails (the first one did, and before that
    one per pooled connection)."""
    pool = DriverPool(
        database_url, min_size=3, max_size=3, statement_timeout_ms=1000, wait_s=2, name="walks"
    )
    with psycopg.connect(libpq_conninfo(database_url), autocommit=True) as admin:
        try:
            await pool.open()
            async with asyncio.timeout(10):
                while backends(admin) < 3:
                    await asyncio.sleep(0.05)
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s AND datname = current_database()",
                (NAME,),
            )
            failed = 0
            for _ in range(4):
                try:
                    async with pool.connect("acme") as conn:  # a tenant's, as a walk's
                        await conn.execute("SELECT 1")
                except psycopg.OperationalError:
                    failed += 1
                await asyncio.sleep(0.3)  # the pool checks the others meanwhile
            assert failed == 0
        finally:
            await pool.close()
