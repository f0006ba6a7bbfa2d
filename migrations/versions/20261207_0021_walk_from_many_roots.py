"""causeway_walk_from(): the causal walk from several events at once, for an audit's
training runs.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07

An audit walked upstream from each training run of its models, one walk per run: runs
that read the same data (a feature set built from thousands of tables) each read all
of it again, up to the node cap each, and an audit of a model trained by 80 such runs
answered TIMEOUT. causeway_walk_from walks from every run at once, each node read once.
causeway_walk_one, the walk from one event, is now causeway_walk_from from a root of
its own (same answers). Both installed from their files, as migration 0013 says a
changed or new function is; the downgrade restores the text 0013 left and drops the
new function.
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_ROOT = Path(__file__).resolve().parents[2]

# The files this migration installs, in dependency order, with the SHA-256 of each one's
# statement.
FUNCTION_FILES = {
    "app/store/sql/causeway_walk_from.sql": "d3b23acc10e3cd4fa3c7d124503a3f45fcd9ae3cecdb890466acd8d0727b9e3b",
    "app/store/sql/causeway_walk_one.sql": "247251f71a1626d2b820fa255b26c73341c0a1ca75cf755b13ad28041e4ccc9e",
}

# causeway_walk_one as migration 0016 installed it (the file before this change).
_BEFORE = """CREATE OR REPLACE FUNCTION causeway_walk_one(root bigint, direction text, max_depth int, max_nodes int)
RETURNS TABLE (node bigint, depth int, truncated boolean)
LANGUAGE sql STABLE ROWS 100 AS $$
WITH RECURSIVE bfs(frontier, seen, depth) AS (
    SELECT ARRAY[root], ARRAY[root], 0
  UNION ALL
    SELECT step.found, bfs.seen || step.found, bfs.depth + 1
    FROM bfs
    CROSS JOIN LATERAL (
        SELECT array_agg(fresh.n ORDER BY fresh.n) AS found
        FROM (
            SELECT c.cause AS n FROM event_causes c
            WHERE direction = 'upstream' AND c.effect = ANY (bfs.frontier)
          UNION ALL
            SELECT c.effect FROM event_causes c
            WHERE direction = 'downstream' AND c.cause = ANY (bfs.frontier)
          -- Distinct, and not seen before: a hashed set difference, as a level's
          -- candidates times the nodes seen (NOT n = ANY (seen)) took seconds on a wide one.
          EXCEPT
            SELECT unnest(bfs.seen)
        ) fresh
    ) step
    WHERE step.found IS NOT NULL
      AND bfs.depth <= max_depth
      AND cardinality(bfs.seen) <= max_nodes
),
reached AS (
    SELECT unnest(bfs.frontier) AS node, bfs.depth FROM bfs
),
kept AS (
    SELECT reached.node, reached.depth FROM reached
    WHERE reached.depth <= max_depth
    ORDER BY reached.depth, reached.node
    LIMIT max_nodes
)
SELECT kept.node, kept.depth, (SELECT count(*) FROM reached) > (SELECT count(*) FROM kept)
FROM kept
$$;
"""


def upgrade() -> None:
    for name in FUNCTION_FILES:
        _install((_ROOT / name).read_text())


# What the downgrade puts back, by function (tests/integration/test_migrations.py reads it).
REPLACED = {"causeway_walk_one": _BEFORE}


def downgrade() -> None:
    for statement in REPLACED.values():
        _install(statement)
    op.execute("DROP FUNCTION causeway_walk_from(bigint[], text, int, int)")


def _install(statement: str) -> None:
    bind = op.get_bind()
    bind.exec_driver_sql("SET LOCAL check_function_bodies = off")
    # As psql would run it: a file's % and :name are SQL, not bind parameters.
    bind.exec_driver_sql(statement, execution_options={"no_parameters": True})
    bind.exec_driver_sql("SET LOCAL check_function_bodies = DEFAULT")
