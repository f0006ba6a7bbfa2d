"""One batch of a projection, in its transaction: read its events after the checkpoint
(up to the head read first), apply or tally them, and flush what the batch kept. A
failure is a ``ProjectionFailed`` at the event it belongs to (``runner`` records it and
stops the projection there)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

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
    def __init__(self, position: int, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.position = position


async def read_and_apply(
    conn: AsyncConnection,
    projection: Projection,
    after: int,
    head: int,
    size: int,
    selection: Selection | None,
) -> tuple[int, int, bool, int]:
    """Read ``projection``'s next batch in (after, head], ``size`` at most, and apply or
    tally it; as ``_apply_events`` answers, and the position of the batch's first event
    (what a failure of its flush is put at: the checkpoint cannot pass it)."""
    if not isinstance(projection, Tallying):
        found = await checkpoints.read_events(conn, projection, after, head, size, selection)
        first = found[0].position if found else head
        return (*await _apply_events(projection, conn, found, size, head, selection), first)
    rows = await checkpoints.read_rows(conn, projection, after, head, size)
    if rows:
        try:
            await projection.tally(conn, rows)
        except Exception as exc:
            raise _failure(rows[0].position, exc) from exc
    more = len(rows) == size
    first = rows[0].position if rows else head
    return len(rows), rows[-1].position if more else head, more, first


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


async def flush_batch(projection: Projection, conn: AsyncConnection, position: int) -> None:
    """A ``Flushing`` projection's writes of the batch; a failure no ``FlushFailed`` puts
    at an event of its own is the batch's, at ``position`` (its first event's)."""
    if isinstance(projection, Flushing):
        try:
            await projection.flush(conn)
        except Exception as exc:
            raise _failure(position, exc) from exc


def _failure(position: int, exc: Exception) -> ProjectionFailed:
    """The failure of the event at ``position``, or of the one a ``FlushFailed`` names
    (a projection's flush, at the batch's end or during a later event's ``apply``)."""
    if isinstance(exc, FlushFailed):
        cause = exc.__cause__
        return ProjectionFailed(exc.position, cause if isinstance(cause, Exception) else exc)
    return ProjectionFailed(position, exc)
