"""What a forger with superuser rights can do to the log, for the tests of what catches it."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import namedtuple_row
from psycopg.types.json import Jsonb
from sqlalchemy import URL

from app.store.chain import link
from app.store.log import record_from_row


def rewrite(database_url: URL, position: int, data: Any, *, move_head: bool = False) -> None:
    """Give the event at ``position`` new JSON ``data`` and recompute its hash, so that it
    matches itself; with ``move_head``, point the log head at the forged hash too."""
    dsn = database_url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True, row_factory=namedtuple_row) as conn:
        row: Any = conn.execute(
            "SELECT events.*, data IS NOT NULL AS has_json_data FROM events WHERE position = %s",
            (position,),
        ).fetchone()
        record = record_from_row(row)
        record.data = data
        forged = link(bytes(row.prev_hash), record)
        conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        conn.execute(
            "UPDATE events SET data = %s, hash = %s WHERE position = %s",
            (Jsonb(data), forged, position),
        )
        conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
        if move_head:
            conn.execute("UPDATE log_head SET hash = %s", (forged,))


def position_of(database_url: URL, event_id: str) -> int:
    dsn = database_url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT position FROM events WHERE id = %s", (event_id,)).fetchone()
    assert found is not None, event_id
    return int(found[0])


def cut_tail(database_url: URL, keep: int) -> None:
    """Delete every event after position ``keep`` (and their causal edges), and point the
    log head at the last one kept: what is left is a chain that checks out on its own."""
    dsn = database_url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # no trigger fires
        conn.execute("DELETE FROM event_causes WHERE effect > %s OR cause > %s", (keep, keep))
        conn.execute("DELETE FROM events WHERE position > %s", (keep,))
        conn.execute(
            "UPDATE log_head SET position = %s,"
            " hash = (SELECT hash FROM events WHERE position = %s)",
            (keep, keep),
        )
