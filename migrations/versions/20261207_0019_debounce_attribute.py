"""The attribute a debounced task's key is the value of.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07

A debounced task kept only its key's value: once its route was defined again to debounce
on another attribute (or deleted and made again with the same id for something else),
an event whose new attribute had the same value superseded it, and that work never ran.
The created decision now names the attribute (``debounce_on``), the row keeps it, and a
task is superseded only by events keyed on the same attribute. Rows made before this
have none, and are matched on the value alone, as they were.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("debounce_on", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("tasks", "debounce_on")
