"""causeway_walk(): ``both`` follows causes upward and effects downward, each its own way.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03

0002's walk took ``both`` as "either edge, from any node": from a cause of the root it
went down again to that cause's other effects (the root's siblings), and up from those to
their other causes, so events that are neither causes nor effects of the root came back
in its lineage. Now ``both`` is the union of the walk upward (by causes only) and the
walk downward (by effects only): ``causeway_walk_one``, 0002's walk for one direction,
which ``upstream`` and ``downstream`` walks run as before.
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# 0002's breadth-first walk, which follows the edges the two conditions admit.
_BFS = """
CREATE OR REPLACE FUNCTION {name}(root bigint, direction text, max_depth int, max_nodes int)
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
            WHERE {upward} AND c.effect = ANY (bfs.frontier)
          UNION ALL
            SELECT c.effect FROM event_causes c
            WHERE {downward} AND c.cause = ANY (bfs.frontier)
        ) x
        WHERE NOT x.n = ANY (bfs.seen)
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
$$
"""
# One way only (``upstream`` or ``downstream``).
_WALK_ONE = _BFS.format(
    name="causeway_walk_one",
    upward="direction = 'upstream'",
    downward="direction = 'downstream'",
)
# 0002's, for downgrade: ``both`` takes either edge from any node.
_UNDIRECTED_BOTH = _BFS.format(
    name="causeway_walk",
    upward="direction IN ('upstream', 'both')",
    downward="direction IN ('downstream', 'both')",
)

# Both ways: the two walks, joined. A node is the root's cause or its effect, never both
# (the log is a DAG), so their union, by depth then position and cut at ``max_nodes``,
# is what one breadth-first walk with two frontiers keeps. One way, the one walk; the
# other branch's filter is false before it runs.
_WALK = """
CREATE OR REPLACE FUNCTION causeway_walk(root bigint, direction text, max_depth int, max_nodes int)
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
$$
"""


def upgrade() -> None:
    op.execute(_WALK_ONE)
    op.execute(_WALK)


def downgrade() -> None:
    op.execute(_UNDIRECTED_BOTH)
    op.execute("DROP FUNCTION causeway_walk_one(bigint, text, int, int)")
