-- causeway_walk(): the lineage of one event, walked in PostgreSQL in one round trip.
--
-- 'upstream' and 'downstream' are causeway_walk_one's walk; 'both' is the union of the
-- walk upward (by causes only) and the walk downward (by effects only), by depth then
-- position and cut at max_nodes: a node is the root's cause or its effect, never both
-- (the log is a DAG), so that is what one walk with two frontiers would keep. Called by
-- app/store/graph.py (walk).
--
-- To change it: edit this file and add a migration that installs it again
-- (see migrations/versions/20261204_0013_functions_from_files.py).

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
    down_walk AS (
        SELECT * FROM causeway_walk_one(root, 'downstream', max_depth, max_nodes)
    ),
    down AS (
        SELECT * FROM down_walk WHERE down_walk.node <> root
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
        -- The whole downward walk's flag: cut down to its root alone, its one row is
        -- the root's, which is not kept twice.
        OR coalesce((SELECT bool_or(down_walk.truncated) FROM down_walk), false) AS truncated
    FROM kept
) both_ways
WHERE direction = 'both'
$$;
