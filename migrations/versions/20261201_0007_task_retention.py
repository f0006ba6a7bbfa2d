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
    # CONCURRENTLY: the tasks table is big where this index is wanted, and a plain CREATE
    # INDEX holds off every lease, completion and dispatch until it is built. A build that
    # failed left an invalid index behind, on which the next migrate stopped: dropped first.
    with op.get_context().autocommit_block():
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_tasks_finished")  # a failed build
        op.create_index(
            "ix_tasks_finished",
            "tasks",
            ["finished_at"],
            postgresql_where=sa.text("state IN ('completed', 'superseded', 'discarded')"),
            postgresql_concurrently=True,
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index("ix_tasks_finished", table_name="tasks", postgresql_concurrently=True)
