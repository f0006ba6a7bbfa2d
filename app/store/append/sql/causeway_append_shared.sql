-- causeway_append_shared(): a group planned on a head that others may have moved since.
--
-- causeway_append refuses a group unless the head is exactly where it was planned on;
-- this function takes such a group as it was planned and moves it onto the head it finds,
-- for an appender that shares the log with other writers:
--
-- - positions move by how far the head moved (shift), and so do the causal edges
--   between events of the group; an edge to an event before the group stays;
-- - each stream's versions move past the versions the others wrote to it meanwhile,
--   read off their events by position (past 10000 of them, each stream's last version
--   is looked up in its unique key instead). The versions the group was planned on must
--   be the stored ones as of the head planned on; when the head has not moved, nothing
--   is looked up;
-- - the hash chain is linked again from the head: each event's canonical encoding
--   (canonical, as the appender encoded it) gets its new position and stream version in
--   place of the planned ones, at the byte offsets splices gives (four an event: where
--   the position's digits start, how many, where the stream version's start, how many;
--   from zero), and is hashed after the new previous hash.
--
-- What else the head's move could change is caught by the unique keys (an id or stream
-- version another writer took); the caller then plans the group again under the lock,
-- and sends no event with an expected version this way. A head behind the one planned
-- on, or a head planned on that the log does not hold (not that hash at that position),
-- is refused as causeway_append refuses it: SQLSTATE 40001, the head's position as DETAIL.
--
-- Returns NULL when the head had not moved, else a JSON object: shift, the new last hash
-- (hex), streams ([tenant, stream, shift] for each stream of the group whose versions
-- moved) and others ([tenant, stream, version] for each stream the others wrote to, the
-- last version they wrote; null past 10000 of their events). new_events and new_edges
-- are as causeway_append reads them; hint, when not NULL, is sent as its NOTIFY.
--
-- Called by app/store/append/writes.py (write_shared).
--
-- To change it: edit this file and add a migration that installs it again
-- (see migrations/versions/20261204_0013_functions_from_files.py).

CREATE OR REPLACE FUNCTION causeway_append_shared(
    after_position bigint,
    after_hash bytea,
    recorded_at timestamptz,
    new_events jsonb,
    new_edges json,
    canonical bytea[],
    splices bigint[],
    hint text
) RETURNS text LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    locked_position bigint;
    locked_hash bytea;
    n integer := jsonb_array_length(new_events);
    shift bigint;
    planned_on bytea;
    others jsonb;
    moved_streams jsonb := '[]'::jsonb;
    stream_shifts jsonb := '{}'::jsonb;
    planned_versions bigint[];
    version_shifts bigint[];
    versions bigint[];
    prevs bytea[];
    hashes bytea[];
    prev bytea;
    c bytea;
    k integer;
BEGIN
    SELECT l.position, l.hash INTO locked_position, locked_hash FROM log_head l FOR UPDATE;
    IF locked_position < after_position
       OR (locked_position = after_position AND locked_hash IS DISTINCT FROM after_hash) THEN
        RAISE EXCEPTION 'causeway: the log head is at %, not at or past % as planned',
            locked_position, after_position
            USING ERRCODE = 'serialization_failure', DETAIL = locked_position::text;
    END IF;
    shift := locked_position - after_position;
    IF shift > 0 THEN
        -- The head the group was planned on must be the log's, at that position: a group
        -- planned on a head that never was (what an appender that lost track believes)
        -- is refused, as causeway_append refuses it. And what others wrote since: the
        -- last version of each stream they appended to, read off their events; none when
        -- there are too many to read. By position, through EXECUTE: planned for these
        -- values on the table as it is now, PostgreSQL reads these rows, and no others,
        -- through the primary key, however old its statistics (none before the table's
        -- first ANALYZE), where a plan kept from while the table was small, or a range
        -- ("position > after_position" looks like a third of a table it knows nothing
        -- of), read the whole table.
        EXECUTE 'SELECT (SELECT hash FROM events WHERE position = $2),
                        CASE WHEN $1 IS NOT NULL THEN (
                            SELECT coalesce(jsonb_agg(jsonb_build_array(tenant, stream, version)), ''[]'')
                            FROM (SELECT tenant, stream, max(stream_version) AS version
                                  FROM events WHERE position = ANY ($1) GROUP BY 1, 2) o)
                        END'
        INTO planned_on, others
        USING CASE WHEN shift <= 10000
                   THEN ARRAY(SELECT generate_series(after_position + 1, locked_position)) END,
              after_position;
        IF after_position = 0 THEN
            planned_on := decode(repeat('00', 32), 'hex');  -- the chain's start
        END IF;
        IF planned_on IS DISTINCT FROM after_hash THEN
            RAISE EXCEPTION 'causeway: the log holds no head % with the hash planned on',
                after_position
                USING ERRCODE = 'serialization_failure', DETAIL = locked_position::text;
        END IF;
        -- The streams of the group that moved: the version each was planned on, against
        -- the stored one, as the others left it.
        IF others IS NOT NULL THEN
            SELECT coalesce(jsonb_agg(jsonb_build_array(m.tenant, m.stream, m.stored - m.planned)), '[]'),
                   coalesce(jsonb_object_agg(m.tenant || chr(31) || m.stream, m.stored - m.planned), '{}')
            INTO moved_streams, stream_shifts
            FROM (
                SELECT g.tenant, g.stream, g.planned, (o.value ->> 2)::bigint AS stored
                FROM (SELECT x.e->>1 AS tenant, x.e->>8 AS stream,
                             min((x.e->>9)::bigint) - 1 AS planned
                      FROM jsonb_array_elements(new_events) AS x(e) GROUP BY 1, 2) g
                JOIN jsonb_array_elements(others) o
                  ON o.value ->> 0 = g.tenant AND o.value ->> 1 = g.stream
            ) m
            WHERE m.stored <> m.planned;
        ELSE
            -- Too many to read: each stream of the group's last version, from the unique key.
            EXECUTE 'SELECT coalesce(jsonb_agg(jsonb_build_array(tenant, stream, stored - planned)), ''[]''),
                            coalesce(jsonb_object_agg(tenant || chr(31) || stream, stored - planned), ''{}'')
                     FROM (
                         SELECT g.tenant, g.stream, g.planned,
                                coalesce((SELECT ev.stream_version FROM events ev
                                          WHERE ev.tenant = g.tenant AND ev.stream = g.stream
                                          ORDER BY ev.stream_version DESC LIMIT 1), 0) AS stored
                         FROM (SELECT x.e->>1 AS tenant, x.e->>8 AS stream,
                                      min((x.e->>9)::bigint) - 1 AS planned
                               FROM jsonb_array_elements($1) AS x(e) GROUP BY 1, 2) g
                     ) m
                     WHERE stored <> planned'
            INTO moved_streams, stream_shifts USING new_events;
        END IF;
        SELECT array_agg((x.e->>9)::bigint ORDER BY x.i),
               array_agg(coalesce((stream_shifts ->> (x.e->>1 || chr(31) || (x.e->>8)))::bigint, 0)
                         ORDER BY x.i)
        INTO planned_versions, version_shifts
        FROM jsonb_array_elements(new_events) WITH ORDINALITY AS x(e, i);
        prev := locked_hash;
        FOR i IN 1..n LOOP
            versions[i] := planned_versions[i] + version_shifts[i];
            k := 4 * i;
            c := canonical[i];
            prevs[i] := prev;
            prev := sha256(
                prev
                || substring(c FROM 1 FOR splices[k - 3]::integer)
                || convert_to((locked_position + i)::text, 'UTF8')
                || substring(c FROM (splices[k - 3] + splices[k - 2] + 1)::integer
                             FOR (splices[k - 1] - splices[k - 3] - splices[k - 2])::integer)
                || convert_to(versions[i]::text, 'UTF8')
                || substring(c FROM (splices[k - 1] + splices[k] + 1)::integer)
            );
            hashes[i] := prev;
        END LOOP;
    END IF;
    INSERT INTO events (
        position, tenant, id, source, type, subject, time, time_rfc3339, recorded_at,
        stream, stream_version, datacontenttype, dataschema, data, data_binary,
        extensions, causes, correlation_id, model_name, model_version, model_signature,
        prev_hash, hash
    )
    SELECT
        locked_position + x.i, x.e->>1, x.e->>2, x.e->>3, x.e->>4, x.e->>5,
        (x.e->>6)::timestamptz, x.e->>7, causeway_append_shared.recorded_at, x.e->>8,
        coalesce(versions[x.i], (x.e->>9)::bigint), x.e->>10, x.e->>11, x.e->12->0,
        decode(x.e->>13, 'hex'), x.e->14,
        CASE WHEN jsonb_array_length(x.e->15) = 0 THEN '{}'::text[]
             ELSE ARRAY(SELECT jsonb_array_elements_text(x.e->15)) END,
        x.e->>16, x.e->>17, x.e->>18, x.e->>19,
        coalesce(prevs[x.i], decode(x.e->>20, 'hex')),
        coalesce(hashes[x.i], decode(x.e->>21, 'hex'))
    FROM jsonb_array_elements(new_events) WITH ORDINALITY AS x(e, i);
    IF json_array_length(new_edges) > 0 THEN
        INSERT INTO event_causes (effect, cause)
        SELECT (edge->>0)::bigint + shift,
               CASE WHEN (edge->>1)::bigint > after_position THEN (edge->>1)::bigint + shift
                    ELSE (edge->>1)::bigint END
        FROM json_array_elements(new_edges) edge;
    END IF;
    UPDATE log_head SET position = locked_position + n,
        hash = coalesce(prev, decode(new_events -> (n - 1) ->> 21, 'hex'));
    IF hint IS NOT NULL THEN
        PERFORM pg_notify('causeway_events', hint);
    END IF;
    IF shift = 0 THEN
        RETURN NULL;
    END IF;
    RETURN json_build_object(
        'shift', shift, 'hash', encode(prev, 'hex'), 'streams', moved_streams, 'others', others
    )::text;
END
$$;
