"""Debounced tasks of a key found in any state, not only ready ones.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07

A debounced task that was leased when a newer event with its key came was passed over
(only a pending task is superseded), and when its attempt then failed or its lease ran
out it was retried beside the newer task, and offered first: stale work ran twice, after
newer work for the key was waiting or done. The failure of such a task now supersedes it
(``scheduler.debouncing``), which looks for the newer task of its key in any state:
``ix_tasks_debounce_digest`` held only ready tasks. The new index holds every task with a
key (finished ones are pruned: ``prune_finished``); the old one, a part of it, goes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_COLUMNS: list[str | sa.TextClause] = ["tenant", "route_id", sa.text("md5(debounce_key)")]


def upgrade() -> None:
    # CONCURRENTLY, as in 0009: a plain build would hold off every lease and dispatch. The
    # old index goes only once the new one is built, so debouncing never scans.
    with op.get_context().autocommit_block():
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_tasks_debounce_key")  # a failed build
        op.create_index(
            "ix_tasks_debounce_key",
            "tasks",
            _COLUMNS,
            postgresql_where=sa.text("debounce_key IS NOT NULL"),
            postgresql_concurrently=True,
        )
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_tasks_debounce_digest")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_tasks_debounce_digest")
        op.create_index(
            "ix_tasks_debounce_digest",
            "tasks",
            _COLUMNS,
            postgresql_where=sa.text("state = 'ready' AND debounce_key IS NOT NULL"),
            postgresql_concurrently=True,
        )
        op.drop_index("ix_tasks_debounce_key", table_name="tasks", postgresql_concurrently=True)
