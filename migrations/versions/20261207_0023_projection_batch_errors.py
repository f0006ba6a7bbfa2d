"""A projection's error may be its batch's: the batch's last event is kept.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07

A batch whose write (a ``Flushing`` projection's flush, a ``Tallying`` one's tally) failed
at no event of its own is stopped at its first event; the error's text may name any row
of the batch, another tenant's among them, and ``GET /projections`` showed it to the
tenant of the first event. ``error_through`` keeps the batch's last event, so the text is
shown only to a tenant every event of the batch belongs to (``app.projections.status``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("projection_checkpoints", sa.Column("error_through", sa.BigInteger()))


def downgrade() -> None:
    op.drop_column("projection_checkpoints", "error_through")
