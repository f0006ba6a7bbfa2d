"""Debounced tasks found by a digest of their key, which any key fits.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

A debounce key is a value of the triggering event (an extension, or a field of its data),
so it can be as long as the event's data. ``ix_tasks_debounce`` held the key itself, and
a btree entry holds at most 2704 bytes: a task whose key was longer could not be written,
and the dispatcher stopped at its event, making no task for any tenant after it. The
index now holds ``md5(debounce_key)`` (32 characters whatever the key); the dispatcher
compares the digests, which the index finds, and then the keys.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_READY_WITH_KEY = sa.text("state = 'ready' AND debounce_key IS NOT NULL")


def upgrade() -> None:
    # CONCURRENTLY, as in 0007: a plain build would hold off every lease and dispatch.
    # The old index goes only once the new one is built, so debouncing never scans.
    with op.get_context().autocommit_block():
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_tasks_debounce_digest")  # a failed build
        op.create_index(
            "ix_tasks_debounce_digest",
            "tasks",
            ["tenant", "route_id", sa.text("md5(debounce_key)")],
            postgresql_where=_READY_WITH_KEY,
            postgresql_concurrently=True,
        )
        # IF EXISTS: a run that dropped it and then failed (before 2026-12-08 the
        # revision's stamp was committed with the later revisions) runs this again.
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_tasks_debounce")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_tasks_debounce",
            "tasks",
            ["tenant", "route_id", "debounce_key"],
            postgresql_where=_READY_WITH_KEY,
            postgresql_concurrently=True,
        )
        op.drop_index("ix_tasks_debounce_digest", table_name="tasks", postgresql_concurrently=True)
