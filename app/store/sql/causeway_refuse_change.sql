-- causeway_refuse_change(): the trigger function that keeps the log append-only.
--
-- The triggers events_append_only and event_causes_append_only (BEFORE UPDATE OR
-- DELETE, per row) and events_no_truncate and event_causes_no_truncate (BEFORE
-- TRUNCATE) run it, so any UPDATE, DELETE or TRUNCATE of a stored event or causal edge
-- fails with SQLSTATE 23001 (restrict_violation). Nothing calls it by name; app.store
-- (log.py, append/writes.py) relies on rows never changing once written.
--
-- To change it: edit this file and add a migration that installs it again
-- (see migrations/versions/20261204_0013_functions_from_files.py).

CREATE OR REPLACE FUNCTION causeway_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'causeway: % on % is refused: the log is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;
