"""What the relay reads of the log, and its checkpoint.

The checkpoint is a row of ``projection_checkpoints`` (named ``relay:nats:<stream>``):
the position up to which JetStream has acknowledged every event the relay sends. It only
moves forward. One relay leads per stream, through a session advisory lock on a
connection of its own, as a projection's runner does (``app.projections.runner``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import any_, bindparam, func, select, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.types import Text

from app.db.engine import DriverStatement
from app.db.tables import events, projection_checkpoints
from app.projections import checkpoints
from app.projections.leadership import Leadership, take_lead
from app.projections.relay.subjects import Tenants
from app.store.reads import compact_json, structured_json

_c = projection_checkpoints.c


@dataclass(frozen=True, slots=True)
class Relayed:
    position: int
    tenant: str
    type: str
    document: bytes  # the structured CloudEvent JSON


@dataclass(frozen=True, slots=True)
class RelayStatus:
    stream: str
    tenants: str
    checkpoint: int
    head: int
    lag_events: int
    lag_seconds: float
    updated_at: datetime | None


def checkpoint_name(stream: str) -> str:
    return f"relay:nats:{stream}"


@dataclass(frozen=True, slots=True)
class Batch:
    events: list[Relayed]
    more: bool  # it stopped at its limit of events or bytes: more may follow before the head


async def read_batch(
    conn: AsyncConnection, after: int, head: int, limit: int, max_bytes: int, tenants: Tenants
) -> Batch:
    """The events to send in (after, head], in position order: ``limit`` at most, and no
    more once their documents reach ``max_bytes`` (the first always comes, whatever its
    size). The rows come from a server-side cursor a few at a time, as many as the
    documents read so far say fit in what is left, so PostgreSQL builds no document past
    the cap and memory holds about ``max_bytes`` whatever the events' sizes."""
    batch: list[Relayed] = []
    size, fetch = 0, _FIRST_FETCH
    statement = _statement(_BATCH, tenants)
    values = {"after": after, "head": head, "limit": limit, "names": sorted(tenants.names)}
    async with statement.cursor(conn, **values) as cursor:
        while rows := await cursor.fetchmany(fetch):
            for r in rows:
                document = compact_json(r.json).encode()
                batch.append(Relayed(r.position, r.tenant, r.type, document))
                size += len(document)
                if size >= max_bytes:
                    return Batch(batch, more=True)
            mean = size // len(batch) + 1
            fetch = max(1, min(_MAX_FETCH, (max_bytes - size) // mean))
    return Batch(batch, more=len(batch) == limit)


async def read_checkpoint(conn: AsyncConnection, name: str) -> int:
    await checkpoints.ENSURE_CHECKPOINT.run(conn, which=name)
    row = await _CHECKPOINT.first(conn, which=name)
    return 0 if row is None else int(row[0])


async def advance(conn: AsyncConnection, name: str, position: int) -> None:
    """Move the checkpoint to ``position`` (never back: a deposed leader's late write
    cannot undo its successor's)."""
    await _ADVANCE.run(conn, which=name, to=position, at=datetime.now(UTC))


async def fetch_relay_status(conn: AsyncConnection, stream: str, tenants: Tenants) -> RelayStatus:
    """How far the relay of ``stream`` lags the head: in positions, and the age of the
    oldest event it has still to send."""
    name = checkpoint_name(stream)
    row = (await conn.execute(select(_c.position, _c.updated_at).where(_c.name == name))).first()
    checkpoint = int(row.position) if row else 0
    head = await checkpoints.read_head(conn)
    pending = select(events.c.recorded_at).where(events.c.position > checkpoint)
    if tenants.names:
        chosen = events.c.tenant == any_(bindparam("names", type_=ARRAY(Text)))
        pending = pending.where(~chosen if tenants.excluding else chosen)
    oldest = (
        await conn.execute(
            pending.order_by(events.c.position).limit(1), {"names": sorted(tenants.names)}
        )
    ).scalar()
    lag_s = (datetime.now(UTC) - oldest).total_seconds() if oldest else 0.0
    return RelayStatus(
        stream=stream,
        tenants=tenants.describe(),
        checkpoint=checkpoint,
        head=head,
        lag_events=head - checkpoint if oldest else 0,
        lag_seconds=round(max(lag_s, 0.0), 3),
        updated_at=row.updated_at if row else None,
    )


def leadership(
    engine: AsyncEngine, name: str
) -> contextlib.AbstractAsyncContextManager[Leadership | None]:
    """Try to lead the relay ``name``: the lead when this process has it, else None."""
    return take_lead(engine, f"causeway.{name}")


def _statement(kinds: tuple[DriverStatement, ...], tenants: Tenants) -> DriverStatement:
    every, only, but = kinds
    if not tenants.names:
        return every
    return but if tenants.excluding else only


def _three(base: Any) -> tuple[DriverStatement, DriverStatement, DriverStatement]:
    """``base`` for every tenant, for the ``names`` only, and for all but the ``names``."""
    chosen = events.c.tenant == any_(bindparam("names", type_=ARRAY(Text)))
    return (
        DriverStatement.of(base),
        DriverStatement.of(base.where(chosen)),
        DriverStatement.of(base.where(~chosen)),
    )


# Built once: the envelope expression costs more to build than the query takes to run.
_BATCH = _three(
    select(events.c.position, events.c.tenant, events.c.type, structured_json())
    .where(events.c.position > bindparam("after"), events.c.position <= bindparam("head"))
    .order_by(events.c.position)
    .limit(bindparam("limit"))
)
# Rows a fetch of the batch's cursor: the first few tell the documents' size, and the
# next fetches take what fits in the bytes left, never more than _MAX_FETCH at once.
_FIRST_FETCH = 32
_MAX_FETCH = 2000
_CHECKPOINT = DriverStatement.of(select(_c.position).where(_c.name == bindparam("which")))
_ADVANCE = DriverStatement.of(
    update(projection_checkpoints)
    .where(_c.name == bindparam("which"))
    .values(position=func.greatest(_c.position, bindparam("to")), updated_at=bindparam("at"))
)
