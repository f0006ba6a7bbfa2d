"""What an operator asks of the projections: each one's checkpoint, how far it lags the
head (events and seconds), its last error and the events it skips.

Projections read every tenant's events, so the text of an error (a key, a subject, a
value) may be another tenant's: ``withhold_others_errors`` shows it only to the tenant
whose event failed, and a batch's error (``error_through``: its write failed at no event
of its own) only to a tenant every event of the batch belongs to.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import any_, literal, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.types import Text

from app.db.tables import events, projection_checkpoints, projection_skips
from app.projections.base import Projection, Selective, narrowing, reads_reserved
from app.projections.checkpoints import SELECTED, UNRESERVED, of_types, read_head, selected

_c = projection_checkpoints.c
WITHHELD = "withheld: the failing event belongs to another tenant"
WITHHELD_BATCH = "withheld: the failing batch holds another tenant's events"


@dataclass(frozen=True, slots=True)
class ProjectionStatus:
    name: str
    checkpoint: int
    head: int
    lag_events: int
    lag_seconds: float
    last_error: str | None
    error_position: int | None
    error_through: int | None  # a batch's error: its last event (error_position its first)
    failures: int
    rebuild_requested: bool
    skipped: list[int]  # positions an operator told it to pass over


@dataclass(frozen=True, slots=True)
class Skip:
    name: str
    position: int
    reason: str
    error: str | None
    skipped_at: datetime


async def fetch_skips(conn: AsyncConnection) -> list[Skip]:
    """Every event an operator told a projection to pass over, by projection and position."""
    found = await conn.execute(
        select(projection_skips).order_by(projection_skips.c.name, projection_skips.c.position)
    )
    return [Skip(r.name, int(r.position), r.reason, r.error, r.skipped_at) for r in found]


async def fetch_status(
    conn: AsyncConnection, projections: Sequence[Projection]
) -> list[ProjectionStatus]:
    rows = {
        row.name: row
        for row in await conn.execute(
            select(projection_checkpoints).where(
                _c.name == any_(literal([p.name for p in projections], ARRAY(Text)))
            )
        )
    }
    # After the checkpoints: each statement reads as of its own start, and a checkpoint
    # moved on after a head read first was past that head (a negative lag).
    head = await read_head(conn)
    skipped: dict[str, list[int]] = {}
    for name, position in await conn.execute(
        select(projection_skips.c.name, projection_skips.c.position)
        .where(projection_skips.c.name == any_(literal(list(rows), ARRAY(Text))))
        .order_by(projection_skips.c.position)
    ):
        skipped.setdefault(name, []).append(int(position))
    found = []
    for projection in projections:
        row = rows.get(projection.name)
        checkpoint = int(row.position) if row else 0
        pending = select(events.c.recorded_at).where(events.c.position > checkpoint)
        chosen: dict[str, list[str]] = {}
        if isinstance(projection, Selective):
            selection = await projection.selection(conn)
            chosen = selected(selection)
            pending = pending.where(SELECTED)
        elif projection.types is not None:
            pending = pending.where(of_types(projection.types))
            if (narrowed := narrowing(projection)) is not None:
                pending = pending.where(narrowed)
        elif not reads_reserved(projection):
            pending = pending.where(UNRESERVED)
        oldest = (await conn.execute(pending.order_by(events.c.position).limit(1), chosen)).scalar()
        lag_s = (datetime.now(UTC) - oldest).total_seconds() if oldest else 0.0
        found.append(
            ProjectionStatus(
                name=projection.name,
                checkpoint=checkpoint,
                head=head,
                lag_events=head - checkpoint if oldest else 0,
                lag_seconds=round(max(lag_s, 0.0), 3),
                last_error=row.last_error if row else None,
                error_position=row.error_position if row else None,
                error_through=row.error_through if row else None,
                failures=int(row.failures) if row else 0,
                rebuild_requested=bool(row.rebuild_requested) if row else False,
                skipped=skipped.get(projection.name, []),
            )
        )
    return found


async def withhold_others_errors(
    conn: AsyncConnection, tenant: str, found: list[ProjectionStatus]
) -> list[ProjectionStatus]:
    """``found`` as ``tenant`` may see it: an error at another tenant's event is replaced
    by ``WITHHELD``, and a batch's error by ``WITHHELD_BATCH`` unless every event of the
    batch is the tenant's (a constraint the batch's write broke names whichever row broke
    it); where and how often stay. An operator reads the text with ``causeway projections
    status``."""
    return [await _as_seen_by(conn, tenant, s) for s in found]


async def _as_seen_by(conn: AsyncConnection, tenant: str, s: ProjectionStatus) -> ProjectionStatus:
    if s.last_error is None or s.error_position is None:
        return s  # none, or a rebuild's own statement failed (its text names no event)
    through = s.error_through if s.error_through is not None else s.error_position
    tenants = await conn.execute(
        select(events.c.tenant)
        .where(events.c.position.between(s.error_position, through))
        .distinct()
        .limit(2)
    )
    if set(tenants.scalars()) == {tenant}:
        return s
    return dataclasses.replace(
        s, last_error=WITHHELD if s.error_through is None else WITHHELD_BATCH
    )
