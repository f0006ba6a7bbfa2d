"""Read models of the scheduler: routes, tasks, pre-warm windows, autoscale state.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "routes",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("spec", postgresql.JSONB(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "id", name="routes_pkey"),
    )
    op.create_table(
        "tasks",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("route_id", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("req_numbers", postgresql.JSONB(), nullable=False),
        sa.Column("req_flags", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("req_labels", postgresql.JSONB(), nullable=False),
        sa.Column("trigger_id", sa.Text(), nullable=False),
        sa.Column("trigger_type", sa.Text(), nullable=False),
        sa.Column("trigger_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("debounce_key", sa.Text(), nullable=True),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_retries", sa.Integer(), nullable=False),
        sa.Column("backoff_base_s", sa.Float(), nullable=False),
        sa.Column("service", sa.Text(), nullable=True),
        sa.Column("on_model_mismatch", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("available_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lease_id", sa.Text(), nullable=True),
        sa.Column("worker", sa.Text(), nullable=True),
        sa.Column("leased_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error_class", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("disposition", sa.Text(), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "state IN ('ready', 'leased', 'completed', 'superseded', 'dead', 'discarded')",
            name="tasks_state_check",
        ),
        sa.PrimaryKeyConstraint("tenant", "id", name="tasks_pkey"),
    )
    # The lease query walks this index in order (priority, then age) and stops at the
    # first row a worker can take; SKIP LOCKED steps over rows other leasers hold.
    op.create_index(
        "ix_tasks_ready",
        "tasks",
        ["tenant", "queue", sa.text("priority DESC"), "seq"],
        postgresql_where=sa.text("state = 'ready'"),
    )
    op.create_index(
        "ix_tasks_leased",
        "tasks",
        ["lease_expires_at"],
        postgresql_where=sa.text("state = 'leased'"),
    )
    op.create_index(
        "ix_tasks_debounce",
        "tasks",
        ["tenant", "route_id", "debounce_key"],
        postgresql_where=sa.text("state = 'ready' AND debounce_key IS NOT NULL"),
    )
    op.create_index(
        "ix_tasks_dead",
        "tasks",
        ["tenant", "finished_at"],
        postgresql_where=sa.text("state = 'dead'"),
    )
    op.create_table(
        "prewarm_windows",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("route_id", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("recent", postgresql.JSONB(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "route_id", "source", name="prewarm_windows_pkey"),
    )
    op.create_table(
        "queue_autoscale",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("recommended", sa.Integer(), nullable=False),
        sa.Column("integral", sa.Float(), nullable=False),
        sa.Column("last_error", sa.Float(), nullable=False),
        sa.Column("observed_s", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "queue", name="queue_autoscale_pkey"),
    )


def downgrade() -> None:
    op.drop_table("queue_autoscale")
    op.drop_table("prewarm_windows")
    op.drop_index("ix_tasks_dead", table_name="tasks")
    op.drop_index("ix_tasks_debounce", table_name="tasks")
    op.drop_index("ix_tasks_leased", table_name="tasks")
    op.drop_index("ix_tasks_ready", table_name="tasks")
    op.drop_table("tasks")
    op.drop_table("routes")
