"""The store's members on the way out are named as CloudEvents names attributes.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07

An event is read back with the store's own members as extension attributes named and
typed as CloudEvents has them: ``streamversion``, ``storedtime`` and ``prevhash`` (they
were ``stream_version``, ``recordedtime`` and ``prev_hash``, which no CloudEvents reader
takes), its causes as ``causationid``. Ingest refuses those three names from producers
now; before, a producer could send an extension by one of them. Read back, the store's
member would hide the producer's value, and a replay would no longer verify against the
hash chain, which sealed the producer's. Stored events are never changed (the log is
append-only), so a database holding such an event is not upgraded: this migration stops
and says how many events carry which name, and the release before keeps serving it.
Nothing else changes; there is nothing to downgrade.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from alembic.util import CommandError

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_NAMES = ("streamversion", "storedtime", "prevhash")


def upgrade() -> None:
    refusal(op.get_bind())


def refusal(connection: sa.Connection) -> None:
    """Refuse (``CommandError``) a database holding an event this release cannot read back
    as stored; ``env.py`` asks it before any migration of an upgrade through this one runs."""
    found = connection.execute(
        sa.text(
            "SELECT name, count(*) FROM events, jsonb_object_keys(extensions) AS name"
            " WHERE jsonb_exists_any(extensions, CAST(:names AS text[]))"
            " AND name = ANY(CAST(:names AS text[])) GROUP BY name ORDER BY name"
        ),
        {"names": list(_NAMES)},
    ).all()
    if found:
        counts = ", ".join(f"{count} with {name!r}" for name, count in found)
        raise CommandError(
            f"stored events carry extensions this release names its own ({counts}): it "
            "reads every event back with the store's streamversion, storedtime and "
            "prevhash, which would hide theirs; keep running the release before"
        )


def downgrade() -> None:
    pass
