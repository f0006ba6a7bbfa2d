-- causeway_append(): a planned group of events written in one statement, under the head.
--
-- The appender plans a group in Python (positions, stream versions, the hash chain) on
-- the head it believes the log is at, and this function writes it: it locks the log_head
-- row, refuses (SQLSTATE 40001, the head's position as DETAIL) unless the head is the one
-- planned on, inserts the events and their causal edges, moves the head, and sends hint
-- as the projections' wake-up NOTIFY unless it is NULL (the appender passes NULL and
-- sends its hints itself, after commit). Each statement takes its snapshot after the lock
-- is held (PL/pgSQL, READ COMMITTED), so nothing is read from before the wait.
--
-- new_events is a JSON array with one array per event, its values in this order:
-- position, tenant, id, source, type, subject, time (the instant, UTC), time_rfc3339,
-- stream, stream_version, datacontenttype, dataschema, data, data_binary, extensions,
-- causes, correlation_id, model_name, model_version, model_signature, prev_hash, hash.
-- data is [value] for JSON data and [] for none (a JSON null is kept apart from no
-- data); data_binary, prev_hash and hash are hex. recorded_at is one for the group.
-- new_edges is a JSON array of [effect, cause] positions.
--
-- Called by app/store/append/writes.py (write_group).
--
-- To change it: edit this file and add a migration that installs it again
-- (see migrations/versions/20261204_0013_functions_from_files.py).

CREATE OR REPLACE FUNCTION causeway_append(
    after_position bigint,
    after_hash bytea,
    head_position bigint,
    head_hash bytea,
    recorded_at timestamptz,
    new_events jsonb,
    new_edges json,
    hint text
) RETURNS void LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    locked_position bigint;
    locked_hash bytea;
BEGIN
    SELECT l.position, l.hash INTO locked_position, locked_hash FROM log_head l FOR UPDATE;
    IF locked_position IS DISTINCT FROM after_position
       OR locked_hash IS DISTINCT FROM after_hash THEN
        RAISE EXCEPTION 'causeway: the log head is at %, not at % as planned',
            locked_position, after_position
            USING ERRCODE = 'serialization_failure', DETAIL = locked_position::text;
    END IF;
    INSERT INTO events (
        position, tenant, id, source, type, subject, time, time_rfc3339, recorded_at,
        stream, stream_version, datacontenttype, dataschema, data, data_binary,
        extensions, causes, correlation_id, model_name, model_version, model_signature,
        prev_hash, hash
    )
    SELECT
        (e->>0)::bigint, e->>1, e->>2, e->>3, e->>4, e->>5, (e->>6)::timestamptz, e->>7,
        causeway_append.recorded_at, e->>8, (e->>9)::bigint, e->>10, e->>11, e->12->0,
        decode(e->>13, 'hex'), e->14,
        CASE WHEN jsonb_array_length(e->15) = 0 THEN '{}'::text[]
             ELSE ARRAY(SELECT jsonb_array_elements_text(e->15)) END,
        e->>16, e->>17, e->>18, e->>19, decode(e->>20, 'hex'), decode(e->>21, 'hex')
    FROM jsonb_array_elements(new_events) AS e;
    IF json_array_length(new_edges) > 0 THEN
        INSERT INTO event_causes (effect, cause)
        SELECT (edge->>0)::bigint, (edge->>1)::bigint FROM json_array_elements(new_edges) edge;
    END IF;
    UPDATE log_head SET position = head_position, hash = head_hash;
    IF hint IS NOT NULL THEN
        PERFORM pg_notify('causeway_events', hint);
    END IF;
END
$$;
