"""The database functions, installed from their ``.sql`` files next to the code that needs them.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04

Until now each function lived only in the migrations that defined and redefined it, so
its current text had to be pieced together from up to three of them. Each now has a
file of its own holding one ``CREATE OR REPLACE FUNCTION``, next to the code that calls
it, and this migration installs the files as they are, read by path from this file's
place in the tree. They hold the text 0001, 0010, 0011 and 0012 left in the database, so
upgrading changes no behaviour.

The rule from here on: to change a function, edit its ``.sql`` file and add a migration
that installs it again, with a copy of ``_install`` and a ``FUNCTION_FILES`` of its own
naming the files it installs and the SHA-256 of each one's statement (from ``CREATE`` to
the end; the comments above it are free to change). A changed signature needs the old
one dropped first: ``CREATE OR REPLACE`` would add an overload. The downgrade restores
the text it replaces, copied in, because the file will have moved on. A new function
gets its file and is installed by the migration that adds it; this ``FUNCTION_FILES``
never changes. ``tests/integration/test_migrations.py`` fails when a file's statement is
not the one the newest migration installing it names, and when a migrated database's
functions are not what PostgreSQL makes of the files.

Replaying history from empty runs this migration with the newest files, perhaps written
against tables that later migrations change; the later migration that changed a file
installs it again, so history still ends at the files. ``_install`` leaves the body
unchecked until the function first runs, as ``pg_dump`` does, so that a ``LANGUAGE sql``
body naming a later column does not stop the replay here.

Downgrade restores the definitions 0012 left, read from the migrations that wrote them.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_ROOT = Path(__file__).resolve().parents[2]
_VERSIONS = Path(__file__).resolve().parent

# The files this migration installs, in dependency order (causeway_walk calls
# causeway_walk_one), each with the SHA-256 of its statement as this migration found it.
FUNCTION_FILES = {
    "app/store/sql/causeway_refuse_change.sql": "cc5c2c3a8f1d2706f9d80b18cf528b7e81322088c58b857ee76524cf1df87385",
    "app/store/sql/causeway_walk_one.sql": "933396a7377f3cfbefaf66a85cbd3a28fe5df828421e110329a42d779428ca50",
    "app/store/sql/causeway_walk.sql": "a29148668f9415dcf2302352fee7a18918c084b0ad7c8746ae230bbbc15ad040",
    "app/store/append/sql/causeway_append.sql": "a81c8ed7b94bab6c5afd1483d8a5a14c0cd4c267a70e6af3119c8acca311db71",
    "app/store/append/sql/causeway_append_shared.sql": "c425a971ae225ed08fa491cd2614551276d0b2661c8e8ecdea6cad6899842bad",
}


def upgrade() -> None:
    for name in FUNCTION_FILES:
        _install((_ROOT / name).read_text())


def downgrade() -> None:
    refuse = _values("20261130_0001_event_log.py")["_REFUSE"]
    walk = _values("20261203_0010_walk_both_ways.py")
    append = _values("20261204_0011_append_hint_optional.py")
    shared = _values("20261204_0012_append_shared.py")["_APPEND_SHARED"]
    for statement in (
        _or_replace(refuse),
        walk["_WALK_ONE"],
        walk["_WALK"],
        append["_APPEND"].replace("{notify}", append["_NOTIFY_IF_HINTED"]),
        _or_replace(shared),
    ):
        _install(statement)


def _install(statement: str) -> None:
    bind = op.get_bind()
    bind.exec_driver_sql("SET LOCAL check_function_bodies = off")
    # As psql would run it: a file's ``%`` and ``:name`` are SQL, not bind parameters.
    bind.exec_driver_sql(statement, execution_options={"no_parameters": True})
    bind.exec_driver_sql("SET LOCAL check_function_bodies = DEFAULT")


def _values(migration: str) -> dict[str, Any]:
    # An earlier migration's module-level values (its SQL text), as it built them: running
    # its module defines them and does nothing else.
    return runpy.run_path(str(_VERSIONS / migration))


def _or_replace(statement: str) -> str:
    return statement.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
