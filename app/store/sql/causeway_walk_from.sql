-- causeway_walk_from(): a bounded breadth-first walk of the causal graph, one way, from
-- every event of roots at once.
--
-- direction is 'upstream' (from effect to cause) or 'downstream' (from cause to
-- effect); any other value walks nowhere but the roots. One row per level carries the
-- frontier and every node seen so far, so each node is reached once, at its shortest
-- distance from the nearest root, and the walk stops one level after max_nodes is
-- passed. The roots are the nodes at depth 0 (give each once). Nodes are kept by depth,
-- then position; truncated says whether max_depth or max_nodes left reachable nodes
-- out. Called by causeway_walk_one (causeway_walk_one.sql), and by app/store/graph.py
-- (walk_from) for an audit's training runs, whose upstreams share their data: walked
-- from each run alone, the shared part was read once per run.
--
-- To change it: edit this file and add a migration that installs it again
-- (see migrations/versions/20261204_0013_functions_from_files.py).

CREATE OR REPLACE FUNCTION causeway_walk_from(roots bigint[], direction text, max_depth int, max_nodes int)
RETURNS TABLE (node bigint, depth int, truncated boolean)
LANGUAGE sql STABLE ROWS 100 AS $$
WITH RECURSIVE bfs(frontier, seen, depth) AS (
    SELECT roots, roots, 0
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
