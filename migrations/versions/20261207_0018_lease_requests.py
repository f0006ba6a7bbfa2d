"""The lease request that leased a task: a retry of that request finds its leases.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07

A worker names each lease request (``request_id``, as SQS's ``ReceiveRequestAttemptId``
does): when the answer is lost on the way back, the same request sent again gets the
tasks it leased, still held under the same leases, instead of new ones, so those do not
wait out their leases and lose an attempt. The leased decision carries the name; the
row keeps it while the task is leased, and the partial index finds a request's tasks.

The index is built CONCURRENTLY, as in 0007: built in the transaction that added the
column, its scan of the whole tasks table ran under that ALTER TABLE's ACCESS EXCLUSIVE
lock, and every lease, dispatch and read of the queues waited for it. The column is
committed first (IF NOT EXISTS: a run whose build then failed left it, and the revision
at 0017), and a failed build's invalid index is dropped before building again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE tasks ADD COLUMN IF NOT EXISTS lease_request text")
    with op.get_context().autocommit_block():
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_tasks_lease_request")  # a failed build
        op.create_index(
            "ix_tasks_lease_request",
            "tasks",
            ["tenant", "lease_request"],
            postgresql_where=sa.text("state = 'leased' AND lease_request IS NOT NULL"),
            postgresql_concurrently=True,
        )


def downgrade() -> None:
    op.drop_index("ix_tasks_lease_request", table_name="tasks")
    op.drop_column("tasks", "lease_request")
