"""causeway_append(): a group written without a wake-up hint when it is given none.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04

0008's function sent ``hint`` (``pg_notify``) in every group's transaction. Each one
costs PostgreSQL a pass over the notification queue and a wake-up of every listening
backend, and each listening server a wake-up of its own, per group. The appender now
sends its groups' hints itself, after they commit and at most one per few milliseconds
(``app.store.append.wake_hints``), so it passes NULL; any other caller still passes a hint, and the
function sends it as before.
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# 0008's function; {notify} stands where its last statement goes.
_APPEND = """
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
{notify}END
$$
"""

_NOTIFY_ALWAYS = "    PERFORM pg_notify('causeway_events', hint);\n"
_NOTIFY_IF_HINTED = (
    "    IF hint IS NOT NULL THEN\n"
    "        PERFORM pg_notify('causeway_events', hint);\n"
    "    END IF;\n"
)


def upgrade() -> None:
    op.execute(_APPEND.replace("{notify}", _NOTIFY_IF_HINTED))


def downgrade() -> None:
    op.execute(_APPEND.replace("{notify}", _NOTIFY_ALWAYS))
