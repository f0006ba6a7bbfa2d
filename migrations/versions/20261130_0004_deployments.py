"""Read models of the deployments projection: current state and history per service.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "deployments",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("service", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("stable_version", sa.Text(), nullable=True),
        sa.Column("candidate_version", sa.Text(), nullable=True),
        sa.Column("candidate_percent", sa.Integer(), nullable=False),
        sa.Column("previous_stable", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "service", name="deployments_pkey"),
    )
    op.create_table(
        "deployment_history",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("service", sa.Text(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("stable_version", sa.Text(), nullable=True),
        sa.Column("candidate_version", sa.Text(), nullable=True),
        sa.Column("candidate_percent", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("actor", sa.Text(), nullable=True),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "service", "position", name="deployment_history_pkey"),
    )


def downgrade() -> None:
    op.drop_table("deployment_history")
    op.drop_table("deployments")
