"""Finished tasks by the time they finished, for pruning their rows.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_tasks_finished",
        "tasks",
        ["finished_at"],
        postgresql_where=sa.text("state IN ('completed', 'superseded', 'discarded')"),
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_finished", table_name="tasks")
