"""causeway_append(): a planned group of events written in one statement, under the head.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

The appender plans a group in Python (positions, stream versions, the hash chain) on the
head it believes the log is at, and this function writes it: it locks the ``log_head``
row, refuses (SQLSTATE 40001, the head's position as DETAIL) unless the head is the one
planned on, inserts the
events and their causal edges, moves the head and sends the projections' wake-up hint.
One round trip, and the head is held only while PostgreSQL itself works: no planning
and no client round trip happen under the lock. Each statement in the function takes
its snapshot after the lock is held (PL/pgSQL, READ COMMITTED), so nothing is read from
before the wait.

``new_events`` is a JSON array of objects named as the columns of ``events``; ``data``
is the event's JSON data, with ``json_null`` true for an explicit JSON ``null`` (which
``json_to_recordset`` reads as SQL NULL, the form for "no data"); ``data_binary``,
``prev_hash`` and ``hash`` are bytea in hex (``\\x...``). ``new_edges`` is a JSON array of
``[effect, cause]`` positions.
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_APPEND = """
CREATE FUNCTION causeway_append(
    after_position bigint,
    after_hash bytea,
    head_position bigint,
    head_hash bytea,
    new_events json,
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
        e.position, e.tenant, e.id, e.source, e.type, e.subject, e.time, e.time_rfc3339,
        e.recorded_at, e.stream, e.stream_version, e.datacontenttype, e.dataschema,
        CASE WHEN e.json_null THEN 'null'::jsonb ELSE e.data END, e.data_binary,
        e.extensions, e.causes, e.correlation_id, e.model_name, e.model_version,
        e.model_signature, e.prev_hash, e.hash
    FROM json_to_recordset(new_events) AS e (
        position bigint, tenant text, id text, source text, type text, subject text,
        time timestamptz, time_rfc3339 text, recorded_at timestamptz, stream text,
        stream_version bigint, datacontenttype text, dataschema text, data jsonb,
        json_null boolean, data_binary bytea, extensions jsonb, causes text[],
        correlation_id text, model_name text, model_version text, model_signature text,
        prev_hash bytea, hash bytea
    );
    IF json_array_length(new_edges) > 0 THEN
        INSERT INTO event_causes (effect, cause)
        SELECT (edge->>0)::bigint, (edge->>1)::bigint FROM json_array_elements(new_edges) edge;
    END IF;
    UPDATE log_head SET position = head_position, hash = head_hash;
    PERFORM pg_notify('causeway_events', hint);
END
$$
"""


def upgrade() -> None:
    op.execute(_APPEND)


def downgrade() -> None:
    op.execute("DROP FUNCTION causeway_append(bigint, bytea, bigint, bytea, json, json, text)")
