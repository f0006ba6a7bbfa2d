"""Migration 0018 on a store in use: the old release keeps leasing and dispatching while
`causeway migrate` runs. 0018 built ``ix_tasks_lease_request`` with a plain CREATE INDEX
in the transaction that had just added the column: the build's scan of the whole tasks
table ran under that ALTER TABLE's ACCESS EXCLUSIVE lock, so every lease, completion,
dispatch and even ``GET /queues`` waited for it (0007, 0009 and 0022 build theirs
CONCURRENTLY for this reason)."""

from __future__ import annotations

from secrets import token_hex
from typing import Any

import psycopg
import pytest
import sqlalchemy
from alembic import command
from sqlalchemy import URL, event

from app.db.schema import alembic_config, current_revision
from tests.conftest import janitor
from tests.integration.upgrades.conftest import libpq


def test_0018_builds_its_index_without_holding_off_the_tasks_table(
    server: URL, template_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    del template_db  # the server's roles exist
    name = f"causeway_lock_{token_hex(4)}"
    with janitor(server, name):
        url = server.set(database=name)
        config = alembic_config(url)
        command.upgrade(config, "0017")
        seen: list[tuple[str, str | None]] = []
        real = sqlalchemy.create_engine

        def watched(*args: Any, **kwargs: Any) -> Any:
            engine = real(*args, **kwargs)

            @event.listens_for(engine, "before_cursor_execute")
            def probe(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
                if "ix_tasks_lease_request" not in statement or "CREATE INDEX" not in statement:
                    return
                # What a worker does at this moment: read the queue, lease a task.
                with psycopg.connect(libpq(url), autocommit=True) as other:
                    other.execute("SET lock_timeout = '500ms'")
                    try:
                        other.execute("SELECT count(*) FROM tasks")
                        other.execute("UPDATE tasks SET worker = worker WHERE false")
                        seen.append((statement, None))
                    except psycopg.errors.LockNotAvailable as error:
                        seen.append((statement, str(error)))

            return engine

        monkeypatch.setattr(sqlalchemy, "create_engine", watched)
        command.upgrade(config, "0018")
        assert current_revision(url) == "0018"
        assert len(seen) == 1, seen
        [(statement, blocked)] = seen
        assert blocked is None, f"tasks was locked while 0018 built its index: {blocked}"
        # And the build itself takes no lock that holds off writes (a plain CREATE INDEX
        # takes SHARE: every lease and completion waits for the scan of the table).
        assert "CONCURRENTLY" in statement, statement
