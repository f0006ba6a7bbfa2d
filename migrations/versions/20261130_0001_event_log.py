"""The event log: events, their causes, the chain head, API keys, append-only triggers.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_REFUSE = """
CREATE FUNCTION causeway_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'causeway: % on % is refused: the log is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("position", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=True),
        sa.Column("time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("time_rfc3339", sa.Text(), nullable=True),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stream", sa.Text(), nullable=False),
        sa.Column("stream_version", sa.BigInteger(), nullable=False),
        sa.Column("datacontenttype", sa.Text(), nullable=True),
        sa.Column("dataschema", sa.Text(), nullable=True),
        sa.Column("data", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("data_binary", sa.LargeBinary(), nullable=True),
        sa.Column(
            "extensions",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "causes",
            postgresql.ARRAY(sa.Text()),
            server_default=sa.text("'{}'::text[]"),
            nullable=False,
        ),
        sa.Column("correlation_id", sa.Text(), nullable=True),
        sa.Column("model_name", sa.Text(), nullable=True),
        sa.Column("model_version", sa.Text(), nullable=True),
        sa.Column("model_signature", sa.Text(), nullable=True),
        sa.Column("prev_hash", sa.LargeBinary(), nullable=False),
        sa.Column("hash", sa.LargeBinary(), nullable=False),
        sa.CheckConstraint("position > 0", name="events_position_positive_check"),
        sa.CheckConstraint("stream_version > 0", name="events_stream_version_positive_check"),
        sa.CheckConstraint(
            "data IS NULL OR data_binary IS NULL", name="events_one_data_column_check"
        ),
        sa.CheckConstraint("octet_length(hash) = 32", name="events_hash_length_check"),
        sa.PrimaryKeyConstraint("position", name="events_pkey"),
    )
    op.create_index("events_tenant_id_key", "events", ["tenant", "id"], unique=True)
    op.create_index(
        "events_tenant_stream_stream_version_key",
        "events",
        ["tenant", "stream", "stream_version"],
        unique=True,
    )
    op.create_index("ix_events_tenant_position", "events", ["tenant", "position"])
    op.create_index("ix_events_tenant_type_position", "events", ["tenant", "type", "position"])
    op.create_index("ix_events_tenant_source_position", "events", ["tenant", "source", "position"])
    op.create_index(
        "ix_events_tenant_correlation_id_position",
        "events",
        ["tenant", "correlation_id", "position"],
    )
    op.create_index(
        "ix_events_tenant_model_name_model_version_position",
        "events",
        ["tenant", "model_name", "model_version", "position"],
    )
    op.create_index("ix_events_tenant_time", "events", ["tenant", "time"])

    op.create_table(
        "event_causes",
        sa.Column("effect", sa.BigInteger(), nullable=False),
        sa.Column("cause", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("cause < effect", name="event_causes_cause_before_effect_check"),
        sa.ForeignKeyConstraint(["cause"], ["events.position"], name="event_causes_cause_fkey"),
        sa.ForeignKeyConstraint(["effect"], ["events.position"], name="event_causes_effect_fkey"),
        sa.PrimaryKeyConstraint("effect", "cause", name="event_causes_pkey"),
    )
    op.create_index("ix_event_causes_cause_effect", "event_causes", ["cause", "effect"])

    op.create_table(
        "log_head",
        sa.Column("singleton", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.LargeBinary(), nullable=False),
        sa.CheckConstraint("singleton", name="log_head_one_row_check"),
        sa.PrimaryKeyConstraint("singleton", name="log_head_pkey"),
    )
    op.execute(
        "INSERT INTO log_head (singleton, position, hash) "
        "VALUES (true, 0, decode(repeat('00', 32), 'hex'))"
    )

    op.create_table(
        "api_keys",
        sa.Column("key_id", sa.Text(), nullable=False),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("scopes", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("secret_sha256", sa.LargeBinary(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("key_id", name="api_keys_pkey"),
    )

    op.execute(_REFUSE)
    for table in ("events", "event_causes"):
        op.execute(
            f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION causeway_refuse_change()"
        )
        op.execute(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION causeway_refuse_change()"
        )


def downgrade() -> None:
    op.drop_table("api_keys")
    op.drop_table("log_head")
    op.drop_table("event_causes")
    op.drop_table("events")
    op.execute("DROP FUNCTION causeway_refuse_change()")
