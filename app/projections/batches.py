"""One batch of a projection, in its transaction: read its events after the checkpoint
(up to the head read first), apply or tally them, and flush what the batch kept. A
failure is a ``ProjectionFailed`` at the event it belongs to (``runner`` records it and
stops the projection there)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from app.projections import checkpoints
from app.projections.base import (
    Applying,
    FlushFailed,
    Flushing,
    Projection,
    Selection,
    Tallying,
)
from app.store.records import StoredEvent

# A projection whose ``apply`` seldom waits on the database (drift) runs a batch of
# thousands without giving the event loop back: every this many events, the runner does,
# so the requests beside it wait for a few hundred events at most, not a batch.
YIELD_EVERY = 256


class ProjectionFailed(Exception):
    """A failure at the event at ``position``; or, with ``through``, of the batch that
    ends at ``through`` (its flush, or its tally, failed at no event of its own: the text
    may then be of any event in the batch)."""

    def __init__(self, position: int, error: BaseException, through: int | None = None) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.position = position
        self.through = through


@dataclass(frozen=True, slots=True)
class Batch:
    """What ``read_and_apply`` did: how many events it applied, the position it reached,
    whether another batch should follow at once, and the positions of its first and last
    event (what a failure of its flush is put at: the checkpoint cannot pass the first)."""

    applied: int
    reached: int
    more: bool
    first: int
    last: int


async def read_and_apply(
    conn: AsyncConnection,
    projection: Projection,
    after: int,
    head: int,
    size: int,
    selection: Selection | None,
) -> Batch:
    """Read ``projection``'s next batch in (after, head], ``size`` at most, and apply or
    tally it."""
    if not isinstance(projection, Tallying):
        found = await checkpoints.read_events(conn, projection, after, head, size, selection)
        applied, reached, more = await _apply_events(projection, conn, found, size, head, selection)
        if not applied:
            return Batch(0, reached, more, head, head)
        return Batch(applied, reached, more, found[0].position, found[applied - 1].position)
    rows = await checkpoints.read_rows(conn, projection, after, head, size)
    if not rows:
        return Batch(0, head, False, head, head)
    first, last = rows[0].position, rows[-1].position
    try:
        await projection.tally(conn, rows)
    except Exception as exc:
        raise _failure(first, exc, last) from exc
    more = len(rows) == size
    return Batch(len(rows), last if more else head, more, first, last)


async def _apply_events(
    projection: Projection,
    conn: AsyncConnection,
    found: Sequence[StoredEvent],
    size: int,
    head: int,
    selection: Selection | None,
) -> tuple[int, int, bool]:
    """Apply ``found`` (a batch of at most ``size`` read up to ``head``) in order; how many,
    the position the batch reached, and whether another should follow at once: it was
    full, or ended at an event that may change what a Selective projection reads."""
    if not isinstance(projection, Applying):
        raise TypeError(f"projection {projection.name!r} neither applies nor tallies")
    reached = found[-1].position if len(found) == size else head
    more = len(found) == size
    for n, event in enumerate(found, 1):
        try:
            await projection.apply(conn, event)
        except Exception as exc:
            raise _failure(event.position, exc) from exc
        if n % YIELD_EVERY == 0:
            await asyncio.sleep(0)  # a handler that awaits nothing holds the loop
        if selection is not None and event.record.type in selection.types:
            return n, event.position, True  # what the projection reads may have changed
    return len(found), reached, more


async def flush_batch(projection: Projection, conn: AsyncConnection, batch: Batch) -> None:
    """A ``Flushing`` projection's writes of ``batch``; a failure no ``FlushFailed`` puts
    at an event of its own is the batch's, at its first event."""
    if isinstance(projection, Flushing):
        try:
            await projection.flush(conn)
        except Exception as exc:
            raise _failure(batch.first, exc, batch.last) from exc


def _failure(position: int, exc: Exception, through: int | None = None) -> ProjectionFailed:
    """The failure of the event at ``position`` (with ``through``: of the batch from it
    to there), or of the one a ``FlushFailed`` names (a projection's flush, at the
    batch's end or during a later event's ``apply``)."""
    if isinstance(exc, FlushFailed):
        cause = exc.__cause__
        return ProjectionFailed(exc.position, cause if isinstance(cause, Exception) else exc)
    return ProjectionFailed(position, exc, through)
