-- causeway_walk_one(): a bounded breadth-first walk of the causal graph, one way, from
-- one event: causeway_walk_from (causeway_walk_from.sql) from a root of its own. Called
-- only by causeway_walk (causeway_walk.sql).
--
-- To change it: edit this file and add a migration that installs it again
-- (see migrations/versions/20261204_0013_functions_from_files.py).

CREATE OR REPLACE FUNCTION causeway_walk_one(root bigint, direction text, max_depth int, max_nodes int)
RETURNS TABLE (node bigint, depth int, truncated boolean)
LANGUAGE sql STABLE ROWS 100 AS $$
SELECT walked.node, walked.depth, walked.truncated
FROM causeway_walk_from(ARRAY[root], direction, max_depth, max_nodes) walked
$$;
