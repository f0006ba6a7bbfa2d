"""The lineage walk both ways says it was cut when the cut leaves only the root of its
downward half.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06

causeway_walk ('both') took the downward walk's truncated flag from its rows less the
root: when max_depth 0 or max_nodes 1 cut the effects away, that left no row, and the
answer said truncated false where DOWNSTREAM with the same cut said true. The flag is
now the whole downward walk's. Installed from the file, as migration 0013 says a
changed function is; the downgrade restores the text 0013 left.
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_ROOT = Path(__file__).resolve().parents[2]

# The file this migration installs, with the SHA-256 of its statement.
FUNCTION_FILES = {
    "app/store/sql/causeway_walk.sql": "372460129b1f7bc3b6c4106263662bd79a54d5f5501b4de41745a92898631771",
}

# causeway_walk as migration 0013 installed it (the file before this change).
_BEFORE = """CREATE OR REPLACE FUNCTION causeway_walk(root bigint, direction text, max_depth int, max_nodes int)
RETURNS TABLE (node bigint, depth int, truncated boolean)
LANGUAGE sql STABLE ROWS 100 AS $$
SELECT one.node, one.depth, one.truncated
FROM causeway_walk_one(root, direction, max_depth, max_nodes) one
WHERE direction <> 'both'
UNION ALL
SELECT both_ways.node, both_ways.depth, both_ways.truncated
FROM (
    WITH up AS (
        SELECT * FROM causeway_walk_one(root, 'upstream', max_depth, max_nodes)
    ),
    down AS (
        SELECT * FROM causeway_walk_one(root, 'downstream', max_depth, max_nodes) w
        WHERE w.node <> root
    ),
    joined AS (
        SELECT up.node, up.depth FROM up UNION ALL SELECT down.node, down.depth FROM down
    ),
    kept AS (
        SELECT joined.node, joined.depth FROM joined
        ORDER BY joined.depth, joined.node
        LIMIT max_nodes
    )
    SELECT kept.node, kept.depth,
        (SELECT count(*) FROM joined) > (SELECT count(*) FROM kept)
        OR coalesce((SELECT bool_or(up.truncated) FROM up), false)
        OR coalesce((SELECT bool_or(down.truncated) FROM down), false) AS truncated
    FROM kept
) both_ways
WHERE direction = 'both'
$$;
"""


def upgrade() -> None:
    for name in FUNCTION_FILES:
        _install((_ROOT / name).read_text())


# What the downgrade puts back, by function (tests/integration/test_migrations.py reads it).
REPLACED = {"causeway_walk": _BEFORE}


def downgrade() -> None:
    for statement in REPLACED.values():
        _install(statement)


def _install(statement: str) -> None:
    bind = op.get_bind()
    bind.exec_driver_sql("SET LOCAL check_function_bodies = off")
    # As psql would run it: a file's % and :name are SQL, not bind parameters.
    bind.exec_driver_sql(statement, execution_options={"no_parameters": True})
    bind.exec_driver_sql("SET LOCAL check_function_bodies = DEFAULT")
