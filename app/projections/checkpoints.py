"""The checkpoint table, and what projections read of the log: the head, and a
projection's events after its checkpoint (those of its types, or of its tenants and
types when it is ``Selective``), but for the events an operator told it to skip.

The runner (``runner``) and the status reads (``status``) share these statements; only
this module and those two write SQL for projections.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    all_,
    and_,
    any_,
    bindparam,
    case,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.types import Text

from app.db.engine import DriverStatement
from app.db.tables import events, log_head, projection_checkpoints, projection_skips
from app.projections.base import (
    Projection,
    Selection,
    Selective,
    Tallying,
    narrowing,
    reads_reserved,
)
from app.store.log import full_row, record_from_row
from app.store.records import RESERVED_TYPE_PREFIX, StoredEvent

_c = projection_checkpoints.c


async def read_events(
    conn: AsyncConnection,
    projection: Projection,
    after: int,
    head: int,
    limit: int,
    selection: Selection | None = None,
) -> list[StoredEvent]:
    """The projection's events in (after, head], in position order, ``limit`` at most,
    but for those it skips."""
    rows = await _read(conn, _READS, projection, after, head, limit, selection)
    return [StoredEvent(record_from_row(r), bytes(r.prev_hash), bytes(r.hash)) for r in rows]


async def read_rows(
    conn: AsyncConnection, projection: Projection, after: int, head: int, limit: int
) -> list[Any]:
    """A ``Tallying`` projection's rows of its ``columns`` in (after, head], as
    ``read_events`` would find its events."""
    reads = _TALLIES.get(projection.name)
    if reads is None:
        if not isinstance(projection, Tallying):
            raise TypeError(f"projection {projection.name!r} names no columns to read")
        reads = _TALLIES[projection.name] = _Reads.of(tuple(projection.columns))
    return await _read(conn, reads, projection, after, head, limit, None)


async def _read(
    conn: AsyncConnection,
    read: _Reads,
    projection: Projection,
    after: int,
    head: int,
    limit: int,
    selection: Selection | None,
) -> list[Any]:
    window = {"after": after, "head": head, "limit": limit, "which": projection.name}
    if selection is not None:
        return await read.selected.rows(conn, **window, **selected(selection))
    if projection.types is None:
        every = read.all if reads_reserved(projection) else read.unreserved
        return await every.rows(conn, **window)
    narrowed = narrowing(projection)
    typed = read.types if narrowed is None else _narrowed(projection, read, narrowed)
    return await typed.rows(conn, **window, types=sorted(projection.types))


def of_types(types: frozenset[str]) -> Any:
    return events.c.type == any_(literal(sorted(types), ARRAY(Text)))


async def advance(conn: AsyncConnection, name: str, position: int, **also: Any) -> None:
    """Move the checkpoint to ``position``; having got there, the projection is healthy."""
    values = {"which": name, "to": position, "at": datetime.now(UTC)}
    if also:
        await conn.execute(_ADVANCE.values(**also), values)
    else:
        await _ADVANCE_ON_DRIVER.run(conn, **values)


@dataclass(frozen=True, slots=True)
class Locked:
    """A projection's checkpoint, locked in the caller's transaction, and the log's head.

    ``failing``: the projection is stopped at an event past its checkpoint (a failed
    rebuild's event is behind it: the projection goes on). ``head`` is read in the same
    statement as the lock, from that statement's snapshot: when the lock was waited for,
    the head as it was before the wait, which is never past what is committed (a batch
    reads up to it, the next one further)."""

    position: int
    failing: bool
    rebuild_requested: bool
    head: int


async def lock_checkpoint(conn: AsyncConnection, name: str) -> Locked:
    """The checkpoint of ``name``, locked (its row made first if it has none), and the
    head: one statement, where a step of every projection after every few appends had
    taken four (the row made, the lock, the head, the rebuild flag)."""
    row = await _LOCK_CHECKPOINT.first(conn, which=name)
    if row is None:
        await ENSURE_CHECKPOINT.run(conn, which=name)
        row = await _LOCK_CHECKPOINT.first(conn, which=name)
        if row is None:  # pragma: no cover - made by the statement before
            raise RuntimeError(f"projection {name!r} has no checkpoint row")
    position, error_position, rebuild_requested, head = row
    if head is None:  # pragma: no cover - the migration makes the row
        raise RuntimeError("the log_head row is missing: the schema is not migrated")
    failing = error_position is not None and error_position > position
    return Locked(int(position), failing, bool(rebuild_requested), int(head))


async def read_head(conn: AsyncConnection) -> int:
    row = await _READ_HEAD.first(conn)
    if row is None:  # pragma: no cover - the migration makes the row
        raise RuntimeError("the log_head row is missing: the schema is not migrated")
    return int(row[0])


# Every step of every projection runs these: built once, not per call, and run on the
# driver (``DriverStatement``): a step is half a dozen statements, and under load each
# projection steps for every few appends.
_SKIPPED = (
    select(projection_skips.c.position)
    .where(
        projection_skips.c.name == bindparam("which"),
        projection_skips.c.position == events.c.position,
    )
    .exists()
)
# A Selective projection's events: its tenants' but from the sources it ignores, and its
# types' (parameters of the same names).
SELECTED = or_(
    and_(
        events.c.tenant == any_(bindparam("tenants", type_=ARRAY(Text))),
        events.c.source != all_(bindparam("ignored", type_=ARRAY(Text))),
    ),
    events.c.type == any_(bindparam("types", type_=ARRAY(Text))),
)


# The events a projection that says ``reads_reserved = False`` reads (``base``).
UNRESERVED = ~events.c.type.startswith(RESERVED_TYPE_PREFIX, autoescape=True)


def selected(selection: Selection) -> dict[str, list[str]]:
    """The values of ``SELECTED``'s parameters for ``selection``."""
    return {
        "tenants": list(selection.tenants),
        "types": list(selection.types),
        "ignored": list(selection.ignored_sources),
    }


@dataclass(frozen=True, slots=True)
class _Reads:
    """A projection's events after its checkpoint: all of them, of its types, or of its
    selection."""

    all: DriverStatement
    unreserved: DriverStatement  # all but the events Causeway writes itself
    types: DriverStatement
    selected: DriverStatement
    typed: Select[Any]  # ``types``'s statement, which a narrowing adds to

    @classmethod
    def of(cls, columns: tuple[Any, ...]) -> _Reads:
        read = (
            select(*columns)
            .where(
                events.c.position > bindparam("after"),
                events.c.position <= bindparam("head"),
                ~_SKIPPED,
            )
            .order_by(events.c.position)
            .limit(bindparam("limit"))
        )
        typed = read.where(events.c.type == any_(bindparam("types", type_=ARRAY(Text))))
        return cls(
            DriverStatement.of(read),
            DriverStatement.of(read.where(UNRESERVED)),
            DriverStatement.of(typed),
            DriverStatement.of(read.where(SELECTED)),
            typed,
        )


_READS = _Reads.of(full_row())
# The reads of ``Tallying`` projections (of their columns) and of projections that narrow
# theirs (``base.narrowing``), by projection name, compiled once each.
_TALLIES: dict[str, _Reads] = {}
_NARROWED: dict[str, DriverStatement] = {}


def _narrowed(
    projection: Projection, read: _Reads, narrowed: ColumnElement[bool]
) -> DriverStatement:
    """``read`` of ``projection``'s types that also meet its narrowing, ``narrowed``."""
    statement = _NARROWED.get(projection.name)
    if statement is None:
        statement = DriverStatement.of(read.typed.where(narrowed))
        _NARROWED[projection.name] = statement
    return statement


_READ_HEAD = DriverStatement.of(select(log_head.c.position))
ENSURE_CHECKPOINT = DriverStatement.of(
    insert(projection_checkpoints).values(name=bindparam("which")).on_conflict_do_nothing()
)
_LOCK_CHECKPOINT = DriverStatement.of(
    select(
        _c.position,
        _c.error_position,
        _c.rebuild_requested,
        select(log_head.c.position).scalar_subquery(),
    )
    .where(_c.name == bindparam("which"))
    .with_for_update(of=projection_checkpoints)
)
REBUILD_REQUESTED = DriverStatement.of(
    select(_c.rebuild_requested).where(_c.name == bindparam("which"))
)
# Having passed the event it stopped at, the projection is healthy; the error of a failed
# rebuild (at or below the checkpoint) stays until a rebuild succeeds (``rebuild``).
_STOPPED = _c.error_position > _c.position  # the old row's values, in an UPDATE
_ADVANCE = (
    update(projection_checkpoints)
    .where(_c.name == bindparam("which"))
    .values(
        position=bindparam("to"),
        updated_at=bindparam("at"),
        last_error=case((_STOPPED, None), else_=_c.last_error),
        error_position=case((_STOPPED, None), else_=_c.error_position),
        error_through=case((_STOPPED, None), else_=_c.error_through),
        failures=case((_STOPPED, 0), else_=_c.failures),
    )
)
_ADVANCE_ON_DRIVER = DriverStatement.of(_ADVANCE)


_CHECKPOINT = DriverStatement.of(select(_c.position).where(_c.name == bindparam("which")))


async def has_reached(conn: AsyncConnection, projection: Projection, position: int) -> bool:
    """Whether the read model on ``conn``'s database shows everything of the log up to
    ``position``: its checkpoint is there, or no event it reads lies between its
    checkpoint and ``position`` (the runner moves the checkpoint past events of no
    interest only once a batch's worth has gone by). An event it stopped at (a failure)
    counts as not applied; one an operator told it to skip, as applied. Each statement
    reads a snapshot no older than the one before, so the answer errs on the side of
    "not yet", and the read that follows sees at least as much."""
    row = await _CHECKPOINT.first(conn, which=projection.name)
    checkpoint = 0 if row is None else int(row[0])
    if checkpoint >= position:
        return True
    if await read_head(conn) < position:
        return False  # this database (a replica) has not got that far in the log
    selection = None
    if isinstance(projection, Selective):
        selection = await projection.selection(conn)
    return not await read_events(conn, projection, checkpoint, position, 1, selection)
