"""causeway_walk(): a bounded breadth-first walk of the causal graph in one round trip.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

One row per level carries the frontier and every node seen so far, so each node is
reached once, at its shortest distance from the root: diamonds cost nothing extra (a
recursive CTE over nodes revisits a node once for every distinct depth it is reached at),
and the walk stops one level after ``max_nodes`` is passed instead of exploring all of
the graph. Nodes are kept by depth, then position; ``truncated`` says whether
``max_depth`` or ``max_nodes`` left reachable nodes out.
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_WALK = """
CREATE FUNCTION causeway_walk(root bigint, direction text, max_depth int, max_nodes int)
RETURNS TABLE (node bigint, depth int, truncated boolean)
LANGUAGE sql STABLE ROWS 100 AS $$
WITH RECURSIVE bfs(frontier, seen, depth) AS (
    SELECT ARRAY[root], ARRAY[root], 0
  UNION ALL
    SELECT step.found, bfs.seen || step.found, bfs.depth + 1
    FROM bfs
    CROSS JOIN LATERAL (
        SELECT array_agg(DISTINCT x.n ORDER BY x.n) AS found
        FROM (
            SELECT c.cause AS n FROM event_causes c
            WHERE direction IN ('upstream', 'both') AND c.effect = ANY (bfs.frontier)
          UNION ALL
            SELECT c.effect FROM event_causes c
            WHERE direction IN ('downstream', 'both') AND c.cause = ANY (bfs.frontier)
        ) x
        WHERE NOT x.n = ANY (bfs.seen)
    ) step
    -- One level past max_depth and past max_nodes, to tell whether anything was left out.
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
$$
"""


def upgrade() -> None:
    op.execute(_WALK)


def downgrade() -> None:
    op.execute("DROP FUNCTION causeway_walk(bigint, text, int, int)")
