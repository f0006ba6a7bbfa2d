--
-- PostgreSQL database dump
--

\restrict XaMD8UDaSh4npyJ5lIEdAewSOnJY4tOa1qdbb7kyrrBlgLUApTs9ZivFDmqbRXS

-- Dumped from database version 15.20 (Debian 15.20-0+deb12u1)
-- Dumped by pg_dump version 15.20 (Debian 15.20-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: causeway_append(bigint, bytea, bigint, bytea, timestamp with time zone, jsonb, json, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.causeway_append(after_position bigint, after_hash bytea, head_position bigint, head_hash bytea, recorded_at timestamp with time zone, new_events jsonb, new_edges json, hint text) RETURNS void
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: causeway_append_shared(bigint, bytea, timestamp with time zone, jsonb, json, bytea[], bigint[], text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.causeway_append_shared(after_position bigint, after_hash bytea, recorded_at timestamp with time zone, new_events jsonb, new_edges json, canonical bytea[], splices bigint[], hint text) RETURNS text
    LANGUAGE plpgsql
    AS $_$
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
$_$;


--
-- Name: causeway_refuse_change(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.causeway_refuse_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'causeway: % on % is refused: the log is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;


--
-- Name: causeway_walk(bigint, text, integer, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.causeway_walk(root bigint, direction text, max_depth integer, max_nodes integer) RETURNS TABLE(node bigint, depth integer, truncated boolean)
    LANGUAGE sql STABLE ROWS 100
    AS $$
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


--
-- Name: causeway_walk_one(bigint, text, integer, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.causeway_walk_one(root bigint, direction text, max_depth integer, max_nodes integer) RETURNS TABLE(node bigint, depth integer, truncated boolean)
    LANGUAGE sql STABLE ROWS 100
    AS $$
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


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: alembic_version; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.alembic_version (
    version_num character varying(32) NOT NULL
);


--
-- Name: api_keys; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.api_keys (
    key_id text NOT NULL,
    tenant text NOT NULL,
    scopes text[] NOT NULL,
    secret_sha256 bytea NOT NULL,
    description text,
    created_at timestamp with time zone NOT NULL,
    revoked_at timestamp with time zone
);


--
-- Name: deployment_history; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.deployment_history (
    tenant text NOT NULL,
    service text NOT NULL,
    "position" bigint NOT NULL,
    at timestamp with time zone NOT NULL,
    action text NOT NULL,
    model text,
    stable_version text,
    candidate_version text,
    candidate_percent integer NOT NULL,
    reason text,
    actor text,
    event_id text NOT NULL
);


--
-- Name: deployments; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.deployments (
    tenant text NOT NULL,
    service text NOT NULL,
    model text,
    stable_version text,
    candidate_version text,
    candidate_percent integer NOT NULL,
    previous_stable text[] NOT NULL,
    status text NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    "position" bigint NOT NULL
);


--
-- Name: drift_sources; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.drift_sources (
    tenant text NOT NULL,
    source text NOT NULL,
    samples jsonb NOT NULL,
    alerting boolean NOT NULL,
    "position" bigint NOT NULL
);


--
-- Name: event_causes; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.event_causes (
    effect bigint NOT NULL,
    cause bigint NOT NULL,
    CONSTRAINT event_causes_event_causes_cause_before_effect_check_check CHECK ((cause < effect))
);


--
-- Name: events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.events (
    "position" bigint NOT NULL,
    tenant text NOT NULL,
    id text NOT NULL,
    source text NOT NULL,
    type text NOT NULL,
    subject text,
    "time" timestamp with time zone,
    time_rfc3339 text,
    recorded_at timestamp with time zone NOT NULL,
    stream text NOT NULL,
    stream_version bigint NOT NULL,
    datacontenttype text,
    dataschema text,
    data jsonb,
    data_binary bytea,
    extensions jsonb DEFAULT '{}'::jsonb NOT NULL,
    causes text[] DEFAULT '{}'::text[] NOT NULL,
    correlation_id text,
    model_name text,
    model_version text,
    model_signature text,
    prev_hash bytea NOT NULL,
    hash bytea NOT NULL,
    CONSTRAINT events_events_hash_length_check_check CHECK ((octet_length(hash) = 32)),
    CONSTRAINT events_events_one_data_column_check_check CHECK (((data IS NULL) OR (data_binary IS NULL))),
    CONSTRAINT events_events_position_positive_check_check CHECK (("position" > 0)),
    CONSTRAINT events_events_stream_version_positive_check_check CHECK ((stream_version > 0))
);


--
-- Name: event_chain_links; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.event_chain_links AS
 SELECT events."position",
    events.prev_hash
   FROM public.events;


--
-- Name: log_head; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.log_head (
    singleton boolean DEFAULT true NOT NULL,
    "position" bigint NOT NULL,
    hash bytea NOT NULL,
    CONSTRAINT log_head_log_head_one_row_check_check CHECK (singleton)
);


--
-- Name: model_aliases; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.model_aliases (
    tenant text NOT NULL,
    name text NOT NULL,
    alias text NOT NULL,
    version text NOT NULL,
    "position" bigint NOT NULL
);


--
-- Name: model_versions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.model_versions (
    tenant text NOT NULL,
    name text NOT NULL,
    version text NOT NULL,
    signature jsonb NOT NULL,
    signature_digest text NOT NULL,
    tags jsonb DEFAULT '{}'::jsonb NOT NULL,
    enforce_outputs boolean DEFAULT false NOT NULL,
    registered_at timestamp with time zone NOT NULL,
    "position" bigint NOT NULL
);


--
-- Name: prewarm_windows; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.prewarm_windows (
    tenant text NOT NULL,
    route_id text NOT NULL,
    source text NOT NULL,
    recent jsonb NOT NULL
);


--
-- Name: projection_checkpoints; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.projection_checkpoints (
    name text NOT NULL,
    "position" bigint DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone,
    last_error text,
    error_position bigint,
    failures integer DEFAULT 0 NOT NULL,
    rebuild_requested boolean DEFAULT false NOT NULL
);


--
-- Name: projection_skips; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.projection_skips (
    name text NOT NULL,
    "position" bigint NOT NULL,
    reason text NOT NULL,
    error text,
    skipped_at timestamp with time zone NOT NULL
);


--
-- Name: queue_autoscale; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.queue_autoscale (
    tenant text NOT NULL,
    queue text NOT NULL,
    recommended integer NOT NULL,
    integral double precision NOT NULL,
    last_error double precision NOT NULL,
    observed_s double precision NOT NULL,
    updated_at timestamp with time zone NOT NULL
);


--
-- Name: routes; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.routes (
    tenant text NOT NULL,
    id text NOT NULL,
    spec jsonb NOT NULL,
    "position" bigint NOT NULL
);


--
-- Name: tasks; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.tasks (
    tenant text NOT NULL,
    id text NOT NULL,
    route_id text NOT NULL,
    kind text NOT NULL,
    queue text NOT NULL,
    priority integer NOT NULL,
    req_numbers jsonb NOT NULL,
    req_flags text[] NOT NULL,
    req_labels jsonb NOT NULL,
    trigger_id text NOT NULL,
    trigger_type text NOT NULL,
    trigger_time timestamp with time zone NOT NULL,
    debounce_key text,
    state text NOT NULL,
    attempts integer NOT NULL,
    max_retries integer NOT NULL,
    backoff_base_s double precision NOT NULL,
    service text,
    on_model_mismatch text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    available_at timestamp with time zone NOT NULL,
    lease_id text,
    worker text,
    leased_at timestamp with time zone,
    lease_expires_at timestamp with time zone,
    error_class text,
    error text,
    disposition text,
    finished_at timestamp with time zone,
    seq bigint NOT NULL,
    version integer NOT NULL,
    "position" bigint NOT NULL,
    CONSTRAINT tasks_tasks_state_check_check CHECK ((state = ANY (ARRAY['ready'::text, 'leased'::text, 'completed'::text, 'superseded'::text, 'dead'::text, 'discarded'::text])))
);


--
-- Data for Name: alembic_version; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.alembic_version (version_num) FROM stdin;
0017
\.


--
-- Data for Name: api_keys; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.api_keys (key_id, tenant, scopes, secret_sha256, description, created_at, revoked_at) FROM stdin;
f76cb684e1c1	acme	{admin}	\\xbbc4a974d82b4543638b6794070a46663dcd70370bff772b60d5df258e43f006	\N	2026-12-07 23:38:28.558165+00	\N
f2d416043b23	acme	{worker}	\\x10f06cc4c4d546ab95869097f93649a9cf2690940472d844e5ffee15e32aa15f	\N	2026-12-07 23:38:28.563833+00	\N
a8988de19c36	acme	{ingest,read}	\\x6679c21bdc003263f091ee444839999d45107b9f8d80db39b72804f8501dd0dc	\N	2026-12-07 23:38:28.564614+00	\N
\.


--
-- Data for Name: deployment_history; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.deployment_history (tenant, service, "position", at, action, model, stable_version, candidate_version, candidate_percent, reason, actor, event_id) FROM stdin;
acme	gate	4	2026-12-07 23:38:28.967928+00	rollout_started	faces	\N	1	100	\N	f76cb684e1c1	causeway:deployment:gate:d853ae9626dd45248b4177c30f3fe519
acme	gate	5	2026-12-07 23:38:28.982365+00	promoted	faces	1	\N	0	\N	f76cb684e1c1	causeway:deployment:gate:f0253f8e43424ddab204d5d2df97d8c4
acme	gate	6	2026-12-07 23:38:29.006519+00	rollout_started	faces	1	2	20	\N	f76cb684e1c1	causeway:deployment:gate:99425c69875942b985e66a9642c9820f
\.


--
-- Data for Name: deployments; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.deployments (tenant, service, model, stable_version, candidate_version, candidate_percent, previous_stable, status, updated_at, "position") FROM stdin;
acme	gate	faces	1	2	20	{}	rolling_out	2026-12-07 23:38:29.006519+00	6
\.


--
-- Data for Name: drift_sources; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.drift_sources (tenant, source, samples, alerting, "position") FROM stdin;
acme	/cameras/gate	[[1796686709013651, 646708890195]]	f	7
acme	/users	[[1796686709089652, 646709089652]]	f	16
\.


--
-- Data for Name: event_causes; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.event_causes (effect, cause) FROM stdin;
8	7
9	8
12	7
13	7
14	7
15	7
19	12
20	13
21	14
22	15
23	16
24	23
24	17
25	17
26	18
27	19
28	27
29	20
30	29
31	21
32	25
\.


--
-- Data for Name: events; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.events ("position", tenant, id, source, type, subject, "time", time_rfc3339, recorded_at, stream, stream_version, datacontenttype, dataschema, data, data_binary, extensions, causes, correlation_id, model_name, model_version, model_signature, prev_hash, hash) FROM stdin;
1	acme	causeway:model:faces:1	causeway:models	causeway.model.registered	\N	\N	\N	2026-12-07 23:38:28.847792+00	causeway:model:faces	1	\N	\N	{"name": "faces", "tags": {}, "version": "1", "signature": {"inputs": [{"name": "image", "type": "binary", "required": true}], "outputs": [{"name": "score", "type": "double", "required": true}, {"name": "label", "type": "string", "required": false}]}, "enforce_outputs": false}	\N	{}	{}	\N	faces	1	sha256:fd1e0a093e6e3cbfdb72c5fa024635cbd3b7973332f3fa9b72702cf6bfdc3158	\\x0000000000000000000000000000000000000000000000000000000000000000	\\xfba459e32ccdf9f186321498b7c195d9d66cdd8c10705baa2252ab33b76fd81e
2	acme	causeway:model:faces:2	causeway:models	causeway.model.registered	\N	\N	\N	2026-12-07 23:38:28.894+00	causeway:model:faces	2	\N	\N	{"name": "faces", "tags": {}, "version": "2", "signature": {"inputs": [{"name": "image", "type": "binary", "required": true}], "outputs": [{"name": "score", "type": "double", "required": true}, {"name": "label", "type": "string", "required": false}]}, "enforce_outputs": false}	\N	{}	{}	\N	faces	2	sha256:fd1e0a093e6e3cbfdb72c5fa024635cbd3b7973332f3fa9b72702cf6bfdc3158	\\xfba459e32ccdf9f186321498b7c195d9d66cdd8c10705baa2252ab33b76fd81e	\\x27bedc924e636e73156930cbde3cb8405a3c377a36622091b9dd4bd974ebc147
3	acme	causeway:model:faces:alias:prod:179023280066350816466991213639119013688	causeway:models	causeway.model.aliased	\N	\N	\N	2026-12-07 23:38:28.913873+00	causeway:model:faces	3	\N	\N	{"name": "faces", "alias": "prod", "version": "1"}	\N	{}	{}	\N	faces	\N	\N	\\x27bedc924e636e73156930cbde3cb8405a3c377a36622091b9dd4bd974ebc147	\\x066418525e24d64d4461d72c176e1b2105301504c4cb19913c658b2ca6dfd4ec
4	acme	causeway:deployment:gate:d853ae9626dd45248b4177c30f3fe519	causeway:deployments	causeway.deployment.rollout_started	\N	\N	\N	2026-12-07 23:38:28.967928+00	causeway:deployment:gate	1	\N	\N	{"actor": "f76cb684e1c1", "model": "faces", "reason": null, "percent": 100, "service": "gate", "version": "1", "strategy": "canary"}	\N	{}	{}	\N	faces	1	\N	\\x066418525e24d64d4461d72c176e1b2105301504c4cb19913c658b2ca6dfd4ec	\\xbd73f161f0d404ff45188b93316df2390f3eeb4148d8765759386762d8bfdf36
5	acme	causeway:deployment:gate:f0253f8e43424ddab204d5d2df97d8c4	causeway:deployments	causeway.deployment.promoted	\N	\N	\N	2026-12-07 23:38:28.982365+00	causeway:deployment:gate	2	\N	\N	{"actor": "f76cb684e1c1", "reason": null, "service": "gate", "version": "1", "replaces": null}	\N	{}	{}	\N	\N	\N	\N	\\xbd73f161f0d404ff45188b93316df2390f3eeb4148d8765759386762d8bfdf36	\\xa0ecb53df1dc1964aa459422a7f4455bd6492b7547f9f0457826faef6cd95984
6	acme	causeway:deployment:gate:99425c69875942b985e66a9642c9820f	causeway:deployments	causeway.deployment.rollout_started	\N	\N	\N	2026-12-07 23:38:29.006519+00	causeway:deployment:gate	3	\N	\N	{"actor": "f76cb684e1c1", "model": "faces", "reason": null, "percent": 20, "service": "gate", "version": "2", "strategy": "canary"}	\N	{}	{}	\N	faces	2	\N	\\xa0ecb53df1dc1964aa459422a7f4455bd6492b7547f9f0457826faef6cd95984	\\xd05556bba39405c16d471dcfd2c69bad16a0429ab4039fbdaf2d0bf5f8deb0d3
7	acme	frame-1	/cameras/gate	com.example.frame.v1	gate	2026-11-30 12:00:00.123456+00	2026-11-30T12:00:00.123456789Z	2026-12-07 23:38:29.013651+00	gate	1	\N	\N	{"n": 1, "tiny": 0.0000025, "motion": 0.92}	\N	{"site": "north"}	{}	run-1	\N	\N	\N	\\xd05556bba39405c16d471dcfd2c69bad16a0429ab4039fbdaf2d0bf5f8deb0d3	\\xf82603884285c76992170b0f5de584528157a101867152dced8a89e549b29162
8	acme	face-1	/models/faces	com.example.face.v1	\N	\N	\N	2026-12-07 23:38:29.02441+00	/models/faces	1	\N	\N	{"score": 0.97}	\N	{}	{frame-1}	run-1	faces	1	\N	\\xf82603884285c76992170b0f5de584528157a101867152dced8a89e549b29162	\\x7d66a9c3b7a9a210e6c1313625fd31bec57f33e2d64c38dbf2943857db3011a4
9	acme	alert-1	/rules	com.example.alert.v1	\N	\N	\N	2026-12-07 23:38:29.03363+00	/rules	1	application/octet-stream	\N	\N	\\x000162696e617279	{}	{face-1}	run-1	\N	\N	\N	\\x7d66a9c3b7a9a210e6c1313625fd31bec57f33e2d64c38dbf2943857db3011a4	\\x22f7fa61fa31f2ef053e82b22c390f6d3c56e3b85e0c7641363200fb79fee77d
10	acme	causeway:route:jobs:20e61d1a75964a9b82b55bacbbc1a94c	causeway:scheduler	causeway.route.defined	\N	\N	\N	2026-12-07 23:38:29.045717+00	causeway:route:jobs	1	\N	\N	{"id": "jobs", "kind": "k", "queue": "q", "types": ["job"], "where": [], "prewarm": null, "service": null, "debounce": null, "priority": null, "requires": {}, "max_retries": 0, "backoff_base_s": 1, "on_model_mismatch": "propose"}	\N	{}	{}	\N	\N	\N	\N	\\x22f7fa61fa31f2ef053e82b22c390f6d3c56e3b85e0c7641363200fb79fee77d	\\x443bac7fe19a8ce520eac568d183521ec5120ac12872ec0e1a22b043044a4b54
11	acme	causeway:route:reindex:9180817283d148aba13ab8060f229c29	causeway:scheduler	causeway.route.defined	\N	\N	\N	2026-12-07 23:38:29.053615+00	causeway:route:reindex	1	\N	\N	{"id": "reindex", "kind": "reindex", "queue": "d", "types": ["profile.changed"], "where": [], "prewarm": null, "service": null, "debounce": {"key": "user_id", "window_s": 3600}, "priority": null, "requires": {}, "max_retries": 3, "backoff_base_s": 1, "on_model_mismatch": "propose"}	\N	{}	{}	\N	\N	\N	\N	\\x443bac7fe19a8ce520eac568d183521ec5120ac12872ec0e1a22b043044a4b54	\\x0e2ab6f2b55637b3f26c3419f1d072394a4d3571a05d82f0e2890e7ab9102cae
12	acme	job-1	/jobs	job	\N	\N	\N	2026-12-07 23:38:29.061624+00	/jobs	1	\N	\N	{"n": 1}	\N	{}	{frame-1}	run-2	\N	\N	\N	\\x0e2ab6f2b55637b3f26c3419f1d072394a4d3571a05d82f0e2890e7ab9102cae	\\xf9ab38913bc37f34d0cce6e9785019461472af92e0cc1e97ff0e0abb43901fd5
13	acme	job-2	/jobs	job	\N	\N	\N	2026-12-07 23:38:29.067133+00	/jobs	2	\N	\N	{"n": 2}	\N	{}	{frame-1}	run-2	\N	\N	\N	\\xf9ab38913bc37f34d0cce6e9785019461472af92e0cc1e97ff0e0abb43901fd5	\\xab9afa8fd77b77c942db5851d55d23223a375fe70f3d747b8ad99b0a43f64b4a
14	acme	job-3	/jobs	job	\N	\N	\N	2026-12-07 23:38:29.070478+00	/jobs	3	\N	\N	{"n": 3}	\N	{}	{frame-1}	run-2	\N	\N	\N	\\xab9afa8fd77b77c942db5851d55d23223a375fe70f3d747b8ad99b0a43f64b4a	\\x80d2028d2b8776d54e51cc087939f0cdb63dc0e83fba24fe9302c84b21e63bd9
15	acme	job-4	/jobs	job	\N	\N	\N	2026-12-07 23:38:29.082689+00	/jobs	4	\N	\N	{"n": 4}	\N	{}	{frame-1}	run-2	\N	\N	\N	\\x80d2028d2b8776d54e51cc087939f0cdb63dc0e83fba24fe9302c84b21e63bd9	\\x5d7b540ae1c7489d69e3cace59267e20e291142a1c1291fd6e7ae09981ac15fb
16	acme	profile-1	/users	profile.changed	\N	2026-11-30 12:00:00+00	2026-11-30T12:00:00Z	2026-12-07 23:38:29.089652+00	/users	1	\N	\N	{"n": 1, "user_id": "ann"}	\N	{}	{}	\N	\N	\N	\N	\\x5d7b540ae1c7489d69e3cace59267e20e291142a1c1291fd6e7ae09981ac15fb	\\x2b72204291421e3c101e017a1458ceeafe2a2228187a7ef3a9be523260eab430
17	acme	profile-2	/users	profile.changed	\N	2026-11-30 12:00:01+00	2026-11-30T12:00:01Z	2026-12-07 23:38:29.091976+00	/users	2	\N	\N	{"n": 2, "user_id": "ann"}	\N	{}	{}	\N	\N	\N	\N	\\x2b72204291421e3c101e017a1458ceeafe2a2228187a7ef3a9be523260eab430	\\x76cf89bef675daf22a02b16878f31e6e0a3b4dccae2b39945b662ec4be2015fc
18	acme	profile-3	/users	profile.changed	\N	2026-11-30 12:00:02+00	2026-11-30T12:00:02Z	2026-12-07 23:38:29.103074+00	/users	3	\N	\N	{"user_id": "bob"}	\N	{}	{}	\N	\N	\N	\N	\\x76cf89bef675daf22a02b16878f31e6e0a3b4dccae2b39945b662ec4be2015fc	\\x4f7a9de6d4d06561ab8c9ac22b48bb2239e503af7d86d5c55ce4ff4be169c13e
19	acme	causeway:task:b5d69e59b3825b64a29a0e1f9c15d16c:1	causeway:scheduler	causeway.task.created	\N	2026-12-07 23:38:29.261813+00	2026-12-07T23:38:29.261813+00:00	2026-12-07 23:38:29.263559+00	causeway:task:b5d69e59b3825b64a29a0e1f9c15d16c	1	\N	\N	{"at": "2026-12-07T23:38:29.261813+00:00", "kind": "k", "queue": "q", "route": "jobs", "tenant": "acme", "service": null, "task_id": "b5d69e59b3825b64a29a0e1f9c15d16c", "trigger": {"id": "job-1", "time": "2026-12-07T23:38:29.061624+00:00", "type": "job", "source": "/jobs"}, "priority": 5, "requires": {"flags": [], "labels": {}, "numbers": {}}, "max_retries": 0, "debounce_key": null, "backoff_base_s": 1, "on_model_mismatch": "propose"}	\N	{}	{job-1}	\N	\N	\N	\N	\\x4f7a9de6d4d06561ab8c9ac22b48bb2239e503af7d86d5c55ce4ff4be169c13e	\\xf6fa3dd4cd875168d45c0ca98243d819c7b507d330a080bd2d33365b7e7a2474
20	acme	causeway:task:4e3f10c4807b57ea98e4cbcfbe3b0a70:1	causeway:scheduler	causeway.task.created	\N	2026-12-07 23:38:29.261813+00	2026-12-07T23:38:29.261813+00:00	2026-12-07 23:38:29.263559+00	causeway:task:4e3f10c4807b57ea98e4cbcfbe3b0a70	1	\N	\N	{"at": "2026-12-07T23:38:29.261813+00:00", "kind": "k", "queue": "q", "route": "jobs", "tenant": "acme", "service": null, "task_id": "4e3f10c4807b57ea98e4cbcfbe3b0a70", "trigger": {"id": "job-2", "time": "2026-12-07T23:38:29.067133+00:00", "type": "job", "source": "/jobs"}, "priority": 5, "requires": {"flags": [], "labels": {}, "numbers": {}}, "max_retries": 0, "debounce_key": null, "backoff_base_s": 1, "on_model_mismatch": "propose"}	\N	{}	{job-2}	\N	\N	\N	\N	\\xf6fa3dd4cd875168d45c0ca98243d819c7b507d330a080bd2d33365b7e7a2474	\\xdac671eff8602b89cc8e6117791c1c268bfb00d7d6fa8b18ffd209428fc5e3c9
21	acme	causeway:task:dbbf3d4695de595ebd78d72418e08447:1	causeway:scheduler	causeway.task.created	\N	2026-12-07 23:38:29.261813+00	2026-12-07T23:38:29.261813+00:00	2026-12-07 23:38:29.263559+00	causeway:task:dbbf3d4695de595ebd78d72418e08447	1	\N	\N	{"at": "2026-12-07T23:38:29.261813+00:00", "kind": "k", "queue": "q", "route": "jobs", "tenant": "acme", "service": null, "task_id": "dbbf3d4695de595ebd78d72418e08447", "trigger": {"id": "job-3", "time": "2026-12-07T23:38:29.070478+00:00", "type": "job", "source": "/jobs"}, "priority": 5, "requires": {"flags": [], "labels": {}, "numbers": {}}, "max_retries": 0, "debounce_key": null, "backoff_base_s": 1, "on_model_mismatch": "propose"}	\N	{}	{job-3}	\N	\N	\N	\N	\\xdac671eff8602b89cc8e6117791c1c268bfb00d7d6fa8b18ffd209428fc5e3c9	\\xd0e7f48c864def0929dd1f1002315df5c38e8cb4bccb3d45a05ed81ccf05667e
22	acme	causeway:task:d475645c13f35fbbaf21d6b0d43051cf:1	causeway:scheduler	causeway.task.created	\N	2026-12-07 23:38:29.261813+00	2026-12-07T23:38:29.261813+00:00	2026-12-07 23:38:29.263559+00	causeway:task:d475645c13f35fbbaf21d6b0d43051cf	1	\N	\N	{"at": "2026-12-07T23:38:29.261813+00:00", "kind": "k", "queue": "q", "route": "jobs", "tenant": "acme", "service": null, "task_id": "d475645c13f35fbbaf21d6b0d43051cf", "trigger": {"id": "job-4", "time": "2026-12-07T23:38:29.082689+00:00", "type": "job", "source": "/jobs"}, "priority": 5, "requires": {"flags": [], "labels": {}, "numbers": {}}, "max_retries": 0, "debounce_key": null, "backoff_base_s": 1, "on_model_mismatch": "propose"}	\N	{}	{job-4}	\N	\N	\N	\N	\\xd0e7f48c864def0929dd1f1002315df5c38e8cb4bccb3d45a05ed81ccf05667e	\\x8c65eeb6cf4a25b19b18a2df13350b99a85553455863dd265722a3a70c3061f1
23	acme	causeway:task:7fccba2bce1154818708caf9720f619f:1	causeway:scheduler	causeway.task.created	\N	2026-12-07 23:38:29.27617+00	2026-12-07T23:38:29.276170+00:00	2026-12-07 23:38:29.286147+00	causeway:task:7fccba2bce1154818708caf9720f619f	1	\N	\N	{"at": "2026-12-07T23:38:29.276170+00:00", "kind": "reindex", "queue": "d", "route": "reindex", "tenant": "acme", "service": null, "task_id": "7fccba2bce1154818708caf9720f619f", "trigger": {"id": "profile-1", "time": "2026-11-30T12:00:00+00:00", "type": "profile.changed", "source": "/users"}, "priority": 5, "requires": {"flags": [], "labels": {}, "numbers": {}}, "max_retries": 3, "debounce_key": "ann", "backoff_base_s": 1, "on_model_mismatch": "propose"}	\N	{}	{profile-1}	\N	\N	\N	\N	\\x8c65eeb6cf4a25b19b18a2df13350b99a85553455863dd265722a3a70c3061f1	\\x5baf998674371774168565d2c40bfc2d1fe9caf7b09bf021b0f928f88cdaed6b
24	acme	causeway:task:7fccba2bce1154818708caf9720f619f:2	causeway:scheduler	causeway.task.superseded	\N	2026-12-07 23:38:29.296176+00	2026-12-07T23:38:29.296176+00:00	2026-12-07 23:38:29.30444+00	causeway:task:7fccba2bce1154818708caf9720f619f	2	\N	\N	{"at": "2026-12-07T23:38:29.296176+00:00", "by": "profile-2", "queue": "d", "by_task": "cc834b9592655e559f1b4e8269a5ef4f", "task_id": "7fccba2bce1154818708caf9720f619f"}	\N	{}	{causeway:task:7fccba2bce1154818708caf9720f619f:1,profile-2}	\N	\N	\N	\N	\\x5baf998674371774168565d2c40bfc2d1fe9caf7b09bf021b0f928f88cdaed6b	\\x41d80e6c1b5ecd931031a7557023fb601822ce36dcdb97163ceea03de6fce206
25	acme	causeway:task:cc834b9592655e559f1b4e8269a5ef4f:1	causeway:scheduler	causeway.task.created	\N	2026-12-07 23:38:29.296176+00	2026-12-07T23:38:29.296176+00:00	2026-12-07 23:38:29.311483+00	causeway:task:cc834b9592655e559f1b4e8269a5ef4f	1	\N	\N	{"at": "2026-12-07T23:38:29.296176+00:00", "kind": "reindex", "queue": "d", "route": "reindex", "tenant": "acme", "service": null, "task_id": "cc834b9592655e559f1b4e8269a5ef4f", "trigger": {"id": "profile-2", "time": "2026-11-30T12:00:01+00:00", "type": "profile.changed", "source": "/users"}, "priority": 5, "requires": {"flags": [], "labels": {}, "numbers": {}}, "max_retries": 3, "debounce_key": "ann", "backoff_base_s": 1, "on_model_mismatch": "propose"}	\N	{}	{profile-2}	\N	\N	\N	\N	\\x41d80e6c1b5ecd931031a7557023fb601822ce36dcdb97163ceea03de6fce206	\\xc999277a54a0247730b15da8f1509404bf7f4707dca74754735e6a5031d8bacf
26	acme	causeway:task:eaa7c833b88059b19183b8580784f487:1	causeway:scheduler	causeway.task.created	\N	2026-12-07 23:38:29.314491+00	2026-12-07T23:38:29.314491+00:00	2026-12-07 23:38:29.316989+00	causeway:task:eaa7c833b88059b19183b8580784f487	1	\N	\N	{"at": "2026-12-07T23:38:29.314491+00:00", "kind": "reindex", "queue": "d", "route": "reindex", "tenant": "acme", "service": null, "task_id": "eaa7c833b88059b19183b8580784f487", "trigger": {"id": "profile-3", "time": "2026-11-30T12:00:02+00:00", "type": "profile.changed", "source": "/users"}, "priority": 5, "requires": {"flags": [], "labels": {}, "numbers": {}}, "max_retries": 3, "debounce_key": "bob", "backoff_base_s": 1, "on_model_mismatch": "propose"}	\N	{}	{profile-3}	\N	\N	\N	\N	\\xc999277a54a0247730b15da8f1509404bf7f4707dca74754735e6a5031d8bacf	\\x18f960059664a6bb902a3df454e20e9125d9293577d3513b4737521f7a61cfd4
27	acme	causeway:task:b5d69e59b3825b64a29a0e1f9c15d16c:2	causeway:scheduler	causeway.task.leased	\N	2026-12-07 23:38:29.362543+00	2026-12-07T23:38:29.362543+00:00	2026-12-07 23:38:29.396065+00	causeway:task:b5d69e59b3825b64a29a0e1f9c15d16c	2	\N	\N	{"at": "2026-12-07T23:38:29.362543+00:00", "spot": false, "lease": "12a84447e24e44129afa486954aa6dda", "queue": "q", "labels": {}, "worker": "w1", "attempt": 1, "task_id": "b5d69e59b3825b64a29a0e1f9c15d16c", "expires_at": "2026-12-07T23:38:59.362543+00:00"}	\N	{}	{causeway:task:b5d69e59b3825b64a29a0e1f9c15d16c:1}	\N	\N	\N	\N	\\x18f960059664a6bb902a3df454e20e9125d9293577d3513b4737521f7a61cfd4	\\x98ee9340da68306456534f82cd430d26904b3ce09b434380696ced2f34232a77
28	acme	causeway:task:b5d69e59b3825b64a29a0e1f9c15d16c:3	causeway:scheduler	causeway.task.completed	\N	2026-12-07 23:38:29.422735+00	2026-12-07T23:38:29.422735+00:00	2026-12-07 23:38:29.424036+00	causeway:task:b5d69e59b3825b64a29a0e1f9c15d16c	3	\N	\N	{"at": "2026-12-07T23:38:29.422735+00:00", "lease": "12a84447e24e44129afa486954aa6dda", "queue": "q", "worker": "w1", "results": [], "task_id": "b5d69e59b3825b64a29a0e1f9c15d16c"}	\N	{}	{causeway:task:b5d69e59b3825b64a29a0e1f9c15d16c:2}	\N	\N	\N	\N	\\x98ee9340da68306456534f82cd430d26904b3ce09b434380696ced2f34232a77	\\x233d79c2c3296d2127d7013a39a2507d79ebe804b83830e699ee7a53f4bb49a9
29	acme	causeway:task:4e3f10c4807b57ea98e4cbcfbe3b0a70:2	causeway:scheduler	causeway.task.leased	\N	2026-12-07 23:38:29.441035+00	2026-12-07T23:38:29.441035+00:00	2026-12-07 23:38:29.445722+00	causeway:task:4e3f10c4807b57ea98e4cbcfbe3b0a70	2	\N	\N	{"at": "2026-12-07T23:38:29.441035+00:00", "spot": false, "lease": "cba9c92d6250410981a3dd55ea027124", "queue": "q", "labels": {}, "worker": "w1", "attempt": 1, "task_id": "4e3f10c4807b57ea98e4cbcfbe3b0a70", "expires_at": "2026-12-07T23:38:59.441035+00:00"}	\N	{}	{causeway:task:4e3f10c4807b57ea98e4cbcfbe3b0a70:1}	\N	\N	\N	\N	\\x233d79c2c3296d2127d7013a39a2507d79ebe804b83830e699ee7a53f4bb49a9	\\xcc38c0408013d26c3723fd5b0398e720803ef81237a79a30eeaf2432d416e73d
30	acme	causeway:task:4e3f10c4807b57ea98e4cbcfbe3b0a70:3	causeway:scheduler	causeway.task.dead_lettered	\N	2026-12-07 23:38:29.465765+00	2026-12-07T23:38:29.465765+00:00	2026-12-07 23:38:29.466926+00	causeway:task:4e3f10c4807b57ea98e4cbcfbe3b0a70	3	\N	\N	{"at": "2026-12-07T23:38:29.465765+00:00", "class": "data_invalid", "input": {"id": "job-2", "data": {"n": 2}, "type": "job", "source": "/jobs", "datacontenttype": null}, "queue": "q", "attempt": 1, "message": "boom", "task_id": "4e3f10c4807b57ea98e4cbcfbe3b0a70", "disposition": "archived"}	\N	{}	{causeway:task:4e3f10c4807b57ea98e4cbcfbe3b0a70:2}	\N	\N	\N	\N	\\xcc38c0408013d26c3723fd5b0398e720803ef81237a79a30eeaf2432d416e73d	\\xc85a0df941516712878f054eeb656544ff5e210ef64d87854ece9dcab5ede79e
31	acme	causeway:task:dbbf3d4695de595ebd78d72418e08447:2	causeway:scheduler	causeway.task.leased	\N	2026-12-07 23:38:29.479225+00	2026-12-07T23:38:29.479225+00:00	2026-12-07 23:38:29.480977+00	causeway:task:dbbf3d4695de595ebd78d72418e08447	2	\N	\N	{"at": "2026-12-07T23:38:29.479225+00:00", "spot": false, "lease": "7171da1343304533aacb5af73e6ef70d", "queue": "q", "labels": {}, "worker": "w1", "attempt": 1, "task_id": "dbbf3d4695de595ebd78d72418e08447", "expires_at": "2026-12-07T23:38:59.479225+00:00"}	\N	{}	{causeway:task:dbbf3d4695de595ebd78d72418e08447:1}	\N	\N	\N	\N	\\xc85a0df941516712878f054eeb656544ff5e210ef64d87854ece9dcab5ede79e	\\xfab6fe4c2694550e215eb1b45207ad091e6a7817fbd597079b36dda8bfc769f3
32	acme	causeway:task:cc834b9592655e559f1b4e8269a5ef4f:2	causeway:scheduler	causeway.task.leased	\N	2026-12-07 23:38:29.499209+00	2026-12-07T23:38:29.499209+00:00	2026-12-07 23:38:29.503158+00	causeway:task:cc834b9592655e559f1b4e8269a5ef4f	2	\N	\N	{"at": "2026-12-07T23:38:29.499209+00:00", "spot": false, "lease": "a26ebbf379b04b32b3af4db8c223cd08", "queue": "d", "labels": {}, "worker": "w1", "attempt": 1, "task_id": "cc834b9592655e559f1b4e8269a5ef4f", "expires_at": "2026-12-07T23:38:59.499209+00:00"}	\N	{}	{causeway:task:cc834b9592655e559f1b4e8269a5ef4f:1}	\N	\N	\N	\N	\\xfab6fe4c2694550e215eb1b45207ad091e6a7817fbd597079b36dda8bfc769f3	\\x2b62cfffa6e5c9e824a28ea876d29b3c3ff6433048e6b6be6b52eea00028abae
\.


--
-- Data for Name: log_head; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.log_head (singleton, "position", hash) FROM stdin;
t	32	\\x2b62cfffa6e5c9e824a28ea876d29b3c3ff6433048e6b6be6b52eea00028abae
\.


--
-- Data for Name: model_aliases; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.model_aliases (tenant, name, alias, version, "position") FROM stdin;
acme	faces	prod	1	3
\.


--
-- Data for Name: model_versions; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.model_versions (tenant, name, version, signature, signature_digest, tags, enforce_outputs, registered_at, "position") FROM stdin;
acme	faces	1	{"inputs": [{"name": "image", "type": "binary", "required": true}], "outputs": [{"name": "score", "type": "double", "required": true}, {"name": "label", "type": "string", "required": false}]}	sha256:fd1e0a093e6e3cbfdb72c5fa024635cbd3b7973332f3fa9b72702cf6bfdc3158	{}	f	2026-12-07 23:38:28.847792+00	1
acme	faces	2	{"inputs": [{"name": "image", "type": "binary", "required": true}], "outputs": [{"name": "score", "type": "double", "required": true}, {"name": "label", "type": "string", "required": false}]}	sha256:fd1e0a093e6e3cbfdb72c5fa024635cbd3b7973332f3fa9b72702cf6bfdc3158	{}	f	2026-12-07 23:38:28.894+00	2
\.


--
-- Data for Name: prewarm_windows; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.prewarm_windows (tenant, route_id, source, recent) FROM stdin;
\.


--
-- Data for Name: projection_checkpoints; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.projection_checkpoints (name, "position", updated_at, last_error, error_position, failures, rebuild_requested) FROM stdin;
model-registry	18	2026-12-07 23:38:29.137666+00	\N	\N	0	f
deployments	18	2026-12-07 23:38:29.177685+00	\N	\N	0	f
drift	18	2026-12-07 23:38:29.213786+00	\N	\N	0	f
scheduler-dispatch	18	2026-12-07 23:38:29.319216+00	\N	\N	0	f
scheduler-tasks	32	2026-12-07 23:38:29.534309+00	\N	\N	0	f
\.


--
-- Data for Name: projection_skips; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.projection_skips (name, "position", reason, error, skipped_at) FROM stdin;
\.


--
-- Data for Name: queue_autoscale; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.queue_autoscale (tenant, queue, recommended, integral, last_error, observed_s, updated_at) FROM stdin;
\.


--
-- Data for Name: routes; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.routes (tenant, id, spec, "position") FROM stdin;
acme	jobs	{"id": "jobs", "kind": "k", "queue": "q", "types": ["job"], "where": [], "prewarm": null, "service": null, "debounce": null, "priority": null, "requires": {}, "max_retries": 0, "backoff_base_s": 1, "on_model_mismatch": "propose"}	10
acme	reindex	{"id": "reindex", "kind": "reindex", "queue": "d", "types": ["profile.changed"], "where": [], "prewarm": null, "service": null, "debounce": {"key": "user_id", "window_s": 3600}, "priority": null, "requires": {}, "max_retries": 3, "backoff_base_s": 1, "on_model_mismatch": "propose"}	11
\.


--
-- Data for Name: tasks; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.tasks (tenant, id, route_id, kind, queue, priority, req_numbers, req_flags, req_labels, trigger_id, trigger_type, trigger_time, debounce_key, state, attempts, max_retries, backoff_base_s, service, on_model_mismatch, created_at, available_at, lease_id, worker, leased_at, lease_expires_at, error_class, error, disposition, finished_at, seq, version, "position") FROM stdin;
acme	d475645c13f35fbbaf21d6b0d43051cf	jobs	k	q	5	{}	{}	{}	job-4	job	2026-12-07 23:38:29.082689+00	\N	ready	0	0	1	\N	propose	2026-12-07 23:38:29.261813+00	2026-12-07 23:38:29.261813+00	\N	\N	\N	\N	\N	\N	\N	\N	22	1	22
acme	7fccba2bce1154818708caf9720f619f	reindex	reindex	d	5	{}	{}	{}	profile-1	profile.changed	2026-11-30 12:00:00+00	ann	superseded	0	3	1	\N	propose	2026-12-07 23:38:29.27617+00	2026-12-07 23:38:29.27617+00	\N	\N	\N	\N	\N	\N	\N	2026-12-07 23:38:29.296176+00	23	2	24
acme	eaa7c833b88059b19183b8580784f487	reindex	reindex	d	5	{}	{}	{}	profile-3	profile.changed	2026-11-30 12:00:02+00	bob	ready	0	3	1	\N	propose	2026-12-07 23:38:29.314491+00	2026-12-07 23:38:29.314491+00	\N	\N	\N	\N	\N	\N	\N	\N	26	1	26
acme	b5d69e59b3825b64a29a0e1f9c15d16c	jobs	k	q	5	{}	{}	{}	job-1	job	2026-12-07 23:38:29.061624+00	\N	completed	1	0	1	\N	propose	2026-12-07 23:38:29.261813+00	2026-12-07 23:38:29.261813+00	\N	w1	2026-12-07 23:38:29.362543+00	2026-12-07 23:38:59.362543+00	\N	\N	\N	2026-12-07 23:38:29.422735+00	19	3	28
acme	4e3f10c4807b57ea98e4cbcfbe3b0a70	jobs	k	q	5	{}	{}	{}	job-2	job	2026-12-07 23:38:29.067133+00	\N	dead	1	0	1	\N	propose	2026-12-07 23:38:29.261813+00	2026-12-07 23:38:29.261813+00	\N	w1	2026-12-07 23:38:29.441035+00	2026-12-07 23:38:59.441035+00	data_invalid	boom	archived	2026-12-07 23:38:29.465765+00	20	3	30
acme	dbbf3d4695de595ebd78d72418e08447	jobs	k	q	5	{}	{}	{}	job-3	job	2026-12-07 23:38:29.070478+00	\N	leased	1	0	1	\N	propose	2026-12-07 23:38:29.261813+00	2026-12-07 23:38:29.261813+00	7171da1343304533aacb5af73e6ef70d	w1	2026-12-07 23:38:29.479225+00	2026-12-07 23:38:59.479225+00	\N	\N	\N	\N	21	2	31
acme	cc834b9592655e559f1b4e8269a5ef4f	reindex	reindex	d	5	{}	{}	{}	profile-2	profile.changed	2026-11-30 12:00:01+00	ann	leased	1	3	1	\N	propose	2026-12-07 23:38:29.296176+00	2026-12-07 23:38:29.296176+00	a26ebbf379b04b32b3af4db8c223cd08	w1	2026-12-07 23:38:29.499209+00	2026-12-07 23:38:59.499209+00	\N	\N	\N	\N	25	2	32
\.


--
-- Name: alembic_version alembic_version_pkc; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.alembic_version
    ADD CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num);


--
-- Name: api_keys api_keys_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_keys
    ADD CONSTRAINT api_keys_pkey PRIMARY KEY (key_id);


--
-- Name: deployment_history deployment_history_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.deployment_history
    ADD CONSTRAINT deployment_history_pkey PRIMARY KEY (tenant, service, "position");


--
-- Name: deployments deployments_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.deployments
    ADD CONSTRAINT deployments_pkey PRIMARY KEY (tenant, service);


--
-- Name: drift_sources drift_sources_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.drift_sources
    ADD CONSTRAINT drift_sources_pkey PRIMARY KEY (tenant, source);


--
-- Name: event_causes event_causes_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.event_causes
    ADD CONSTRAINT event_causes_pkey PRIMARY KEY (effect, cause);


--
-- Name: events events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.events
    ADD CONSTRAINT events_pkey PRIMARY KEY ("position");


--
-- Name: log_head log_head_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.log_head
    ADD CONSTRAINT log_head_pkey PRIMARY KEY (singleton);


--
-- Name: model_aliases model_aliases_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.model_aliases
    ADD CONSTRAINT model_aliases_pkey PRIMARY KEY (tenant, name, alias);


--
-- Name: model_versions model_versions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.model_versions
    ADD CONSTRAINT model_versions_pkey PRIMARY KEY (tenant, name, version);


--
-- Name: prewarm_windows prewarm_windows_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.prewarm_windows
    ADD CONSTRAINT prewarm_windows_pkey PRIMARY KEY (tenant, route_id, source);


--
-- Name: projection_checkpoints projection_checkpoints_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.projection_checkpoints
    ADD CONSTRAINT projection_checkpoints_pkey PRIMARY KEY (name);


--
-- Name: projection_skips projection_skips_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.projection_skips
    ADD CONSTRAINT projection_skips_pkey PRIMARY KEY (name, "position");


--
-- Name: queue_autoscale queue_autoscale_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.queue_autoscale
    ADD CONSTRAINT queue_autoscale_pkey PRIMARY KEY (tenant, queue);


--
-- Name: routes routes_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.routes
    ADD CONSTRAINT routes_pkey PRIMARY KEY (tenant, id);


--
-- Name: tasks tasks_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tasks
    ADD CONSTRAINT tasks_pkey PRIMARY KEY (tenant, id);


--
-- Name: events_tenant_id_key; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX events_tenant_id_key ON public.events USING btree (tenant, id);


--
-- Name: events_tenant_stream_stream_version_key; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX events_tenant_stream_stream_version_key ON public.events USING btree (tenant, stream, stream_version);


--
-- Name: ix_event_causes_cause_effect; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_event_causes_cause_effect ON public.event_causes USING btree (cause, effect);


--
-- Name: ix_events_tenant_correlation_id_position; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_events_tenant_correlation_id_position ON public.events USING btree (tenant, correlation_id, "position");


--
-- Name: ix_events_tenant_model_name_model_version_position; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_events_tenant_model_name_model_version_position ON public.events USING btree (tenant, model_name, model_version, "position");


--
-- Name: ix_events_tenant_position; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_events_tenant_position ON public.events USING btree (tenant, "position");


--
-- Name: ix_events_tenant_source_position; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_events_tenant_source_position ON public.events USING btree (tenant, source, "position");


--
-- Name: ix_events_tenant_time; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_events_tenant_time ON public.events USING btree (tenant, "time");


--
-- Name: ix_events_tenant_type_position; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_events_tenant_type_position ON public.events USING btree (tenant, type, "position");


--
-- Name: ix_tasks_dead; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_tasks_dead ON public.tasks USING btree (tenant, finished_at) WHERE (state = 'dead'::text);


--
-- Name: ix_tasks_debounce_digest; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_tasks_debounce_digest ON public.tasks USING btree (tenant, route_id, md5(debounce_key)) WHERE ((state = 'ready'::text) AND (debounce_key IS NOT NULL));


--
-- Name: ix_tasks_finished; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_tasks_finished ON public.tasks USING btree (finished_at) WHERE (state = ANY (ARRAY['completed'::text, 'superseded'::text, 'discarded'::text]));


--
-- Name: ix_tasks_leased; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_tasks_leased ON public.tasks USING btree (lease_expires_at) WHERE (state = 'leased'::text);


--
-- Name: ix_tasks_ready; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_tasks_ready ON public.tasks USING btree (tenant, queue, priority DESC, seq) WHERE (state = 'ready'::text);


--
-- Name: event_causes event_causes_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER event_causes_append_only BEFORE DELETE OR UPDATE ON public.event_causes FOR EACH ROW EXECUTE FUNCTION public.causeway_refuse_change();


--
-- Name: event_causes event_causes_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER event_causes_no_truncate BEFORE TRUNCATE ON public.event_causes FOR EACH STATEMENT EXECUTE FUNCTION public.causeway_refuse_change();


--
-- Name: events events_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER events_append_only BEFORE DELETE OR UPDATE ON public.events FOR EACH ROW EXECUTE FUNCTION public.causeway_refuse_change();


--
-- Name: events events_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON public.events FOR EACH STATEMENT EXECUTE FUNCTION public.causeway_refuse_change();


--
-- Name: event_causes event_causes_cause_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.event_causes
    ADD CONSTRAINT event_causes_cause_fkey FOREIGN KEY (cause) REFERENCES public.events("position");


--
-- Name: event_causes event_causes_effect_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.event_causes
    ADD CONSTRAINT event_causes_effect_fkey FOREIGN KEY (effect) REFERENCES public.events("position");


--
-- Name: api_keys; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.api_keys ENABLE ROW LEVEL SECURITY;

--
-- Name: deployment_history; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.deployment_history ENABLE ROW LEVEL SECURITY;

--
-- Name: deployments; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.deployments ENABLE ROW LEVEL SECURITY;

--
-- Name: drift_sources; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.drift_sources ENABLE ROW LEVEL SECURITY;

--
-- Name: events; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.events ENABLE ROW LEVEL SECURITY;

--
-- Name: api_keys every_tenant; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY every_tenant ON public.api_keys TO causeway_system USING (true) WITH CHECK (true);


--
-- Name: deployment_history every_tenant; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY every_tenant ON public.deployment_history TO causeway_system USING (true) WITH CHECK (true);


--
-- Name: deployments every_tenant; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY every_tenant ON public.deployments TO causeway_system USING (true) WITH CHECK (true);


--
-- Name: drift_sources every_tenant; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY every_tenant ON public.drift_sources TO causeway_system USING (true) WITH CHECK (true);


--
-- Name: events every_tenant; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY every_tenant ON public.events TO causeway_system USING (true) WITH CHECK (true);


--
-- Name: model_aliases every_tenant; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY every_tenant ON public.model_aliases TO causeway_system USING (true) WITH CHECK (true);


--
-- Name: model_versions every_tenant; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY every_tenant ON public.model_versions TO causeway_system USING (true) WITH CHECK (true);


--
-- Name: prewarm_windows every_tenant; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY every_tenant ON public.prewarm_windows TO causeway_system USING (true) WITH CHECK (true);


--
-- Name: queue_autoscale every_tenant; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY every_tenant ON public.queue_autoscale TO causeway_system USING (true) WITH CHECK (true);


--
-- Name: routes every_tenant; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY every_tenant ON public.routes TO causeway_system USING (true) WITH CHECK (true);


--
-- Name: tasks every_tenant; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY every_tenant ON public.tasks TO causeway_system USING (true) WITH CHECK (true);


--
-- Name: model_aliases; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.model_aliases ENABLE ROW LEVEL SECURITY;

--
-- Name: model_versions; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.model_versions ENABLE ROW LEVEL SECURITY;

--
-- Name: prewarm_windows; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.prewarm_windows ENABLE ROW LEVEL SECURITY;

--
-- Name: queue_autoscale; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.queue_autoscale ENABLE ROW LEVEL SECURITY;

--
-- Name: routes; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.routes ENABLE ROW LEVEL SECURITY;

--
-- Name: tasks; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.tasks ENABLE ROW LEVEL SECURITY;

--
-- Name: api_keys tenant_rows; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_rows ON public.api_keys TO causeway_service USING ((tenant = current_setting('causeway.tenant'::text, true)));


--
-- Name: deployment_history tenant_rows; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_rows ON public.deployment_history TO causeway_service USING ((tenant = current_setting('causeway.tenant'::text, true)));


--
-- Name: deployments tenant_rows; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_rows ON public.deployments TO causeway_service USING ((tenant = current_setting('causeway.tenant'::text, true)));


--
-- Name: drift_sources tenant_rows; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_rows ON public.drift_sources TO causeway_service USING ((tenant = current_setting('causeway.tenant'::text, true)));


--
-- Name: events tenant_rows; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_rows ON public.events TO causeway_service USING ((tenant = current_setting('causeway.tenant'::text, true)));


--
-- Name: model_aliases tenant_rows; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_rows ON public.model_aliases TO causeway_service USING ((tenant = current_setting('causeway.tenant'::text, true)));


--
-- Name: model_versions tenant_rows; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_rows ON public.model_versions TO causeway_service USING ((tenant = current_setting('causeway.tenant'::text, true)));


--
-- Name: prewarm_windows tenant_rows; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_rows ON public.prewarm_windows TO causeway_service USING ((tenant = current_setting('causeway.tenant'::text, true)));


--
-- Name: queue_autoscale tenant_rows; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_rows ON public.queue_autoscale TO causeway_service USING ((tenant = current_setting('causeway.tenant'::text, true)));


--
-- Name: routes tenant_rows; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_rows ON public.routes TO causeway_service USING ((tenant = current_setting('causeway.tenant'::text, true)));


--
-- Name: tasks tenant_rows; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_rows ON public.tasks TO causeway_service USING ((tenant = current_setting('causeway.tenant'::text, true)));


--
-- Name: SCHEMA public; Type: ACL; Schema: -; Owner: -
--

GRANT USAGE ON SCHEMA public TO causeway_system;
GRANT USAGE ON SCHEMA public TO causeway_service;


--
-- Name: TABLE alembic_version; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.alembic_version TO causeway_system;


--
-- Name: TABLE api_keys; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.api_keys TO causeway_system;
GRANT SELECT ON TABLE public.api_keys TO causeway_service;


--
-- Name: TABLE deployment_history; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.deployment_history TO causeway_system;
GRANT SELECT ON TABLE public.deployment_history TO causeway_service;


--
-- Name: TABLE deployments; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.deployments TO causeway_system;
GRANT SELECT ON TABLE public.deployments TO causeway_service;


--
-- Name: TABLE drift_sources; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.drift_sources TO causeway_system;
GRANT SELECT ON TABLE public.drift_sources TO causeway_service;


--
-- Name: TABLE event_causes; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.event_causes TO causeway_system;
GRANT SELECT ON TABLE public.event_causes TO causeway_service;


--
-- Name: TABLE events; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.events TO causeway_system;
GRANT SELECT ON TABLE public.events TO causeway_service;


--
-- Name: TABLE event_chain_links; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.event_chain_links TO causeway_service;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.event_chain_links TO causeway_system;


--
-- Name: TABLE log_head; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.log_head TO causeway_system;
GRANT SELECT ON TABLE public.log_head TO causeway_service;


--
-- Name: TABLE model_aliases; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.model_aliases TO causeway_system;
GRANT SELECT ON TABLE public.model_aliases TO causeway_service;


--
-- Name: TABLE model_versions; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.model_versions TO causeway_system;
GRANT SELECT ON TABLE public.model_versions TO causeway_service;


--
-- Name: TABLE prewarm_windows; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.prewarm_windows TO causeway_system;
GRANT SELECT ON TABLE public.prewarm_windows TO causeway_service;


--
-- Name: TABLE projection_checkpoints; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.projection_checkpoints TO causeway_system;
GRANT SELECT ON TABLE public.projection_checkpoints TO causeway_service;


--
-- Name: TABLE projection_skips; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.projection_skips TO causeway_system;
GRANT SELECT ON TABLE public.projection_skips TO causeway_service;


--
-- Name: TABLE queue_autoscale; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.queue_autoscale TO causeway_system;
GRANT SELECT ON TABLE public.queue_autoscale TO causeway_service;


--
-- Name: TABLE routes; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.routes TO causeway_system;
GRANT SELECT ON TABLE public.routes TO causeway_service;


--
-- Name: TABLE tasks; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.tasks TO causeway_system;
GRANT SELECT ON TABLE public.tasks TO causeway_service;


--
-- Name: DEFAULT PRIVILEGES FOR SEQUENCES; Type: DEFAULT ACL; Schema: public; Owner: -
--

ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT ALL ON SEQUENCES  TO causeway_system;


--
-- Name: DEFAULT PRIVILEGES FOR TABLES; Type: DEFAULT ACL; Schema: public; Owner: -
--

ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT SELECT ON TABLES  TO causeway_service;
ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT SELECT,INSERT,DELETE,UPDATE ON TABLES  TO causeway_system;


--
-- PostgreSQL database dump complete
--

\unrestrict XaMD8UDaSh4npyJ5lIEdAewSOnJY4tOa1qdbb7kyrrBlgLUApTs9ZivFDmqbRXS

