"""Events an operator told a projection to pass over.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "projection_skips",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("skipped_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", "position", name="projection_skips_pkey"),
    )


def downgrade() -> None:
    op.drop_table("projection_skips")
