"""What a projection is: a named handler over events in position order.

Its read-model writes and its checkpoint commit in one transaction, so each event takes
effect exactly once, whatever crashes in between. ``tables`` are the read model (a rebuild
empties them); ``types`` are the event types it reads (others only move its checkpoint
forward; ``None``: every event). Handlers must be deterministic: a rebuild from position 0
gives the same state.

A projection is ``Applying``: ``apply`` gets each event whole, its record and its place
in the chain (a ``StoredEvent``); or ``Tallying``: it names the few columns it reads of
every event (``columns``), and ``tally`` gets a batch's rows of them at once. The second
is for a projection that reads every event and little of each (the drift watch: a source
and two times): no record is built per event, and PostgreSQL sends those columns alone.
One that keeps what a batch changes in memory and writes it once is ``Flushing``: its
``flush`` runs in the batch's transaction after the batch's last ``apply`` or its
``tally`` (and may be called by the projection itself between them).

A projection whose interest depends on its own state (the dispatcher reads only tenants
that have routes) is ``Selective``: at the start of each batch it names the tenants it
reads, and the types that can change that (a batch ends after an event of one of them).

One that never reads the events Causeway writes itself (types under
``RESERVED_TYPE_PREFIX``: the scheduler's decisions, alerts, registrations) says
``reads_reserved = False`` (``reads_reserved``): they are passed over in its read, and
its lag counts none of them.

One whose types hold many events it would only pass over names a condition on
``events`` that the rest meet, ``reads_only`` (``narrowing``): its read and its lag
leave the others in the database (the task book reads only the decisions a task row
lacks: the command that decided wrote the row itself).

An append wakes a projection whose types it names (``types`` None: any append), but for
one of nothing but its ``quiet_types`` (``quiet_types``): types it never reads whatever
its state (the dispatcher's, the scheduler's own decisions). Polling still moves its
checkpoint past them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from sqlalchemy import ColumnElement, Table
from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.records import StoredEvent


class Projection(Protocol):
    """What every projection has; it reads its events as ``Applying`` or ``Tallying``
    (one of the two)."""

    @property
    def name(self) -> str: ...

    @property
    def tables(self) -> Sequence[Table]: ...

    @property
    def types(self) -> frozenset[str] | None: ...


@runtime_checkable
class Applying(Protocol):
    async def apply(self, conn: AsyncConnection, event: StoredEvent) -> None:
        """Apply one event, in its batch's transaction."""
        ...


@runtime_checkable
class Tallying(Protocol):
    @property
    def columns(self) -> tuple[ColumnElement[Any], ...]:
        """What it reads of each event: expressions over ``events``, among them
        ``events.c.position``."""
        ...

    async def tally(self, conn: AsyncConnection, rows: Sequence[Any]) -> None:
        """Apply a batch's rows of ``columns`` (named tuples, in position order), in its
        transaction. A failure that belongs to one row raises ``FlushFailed`` with its
        position; any other is put at the batch's first row."""
        ...


@dataclass(frozen=True, slots=True)
class Selection:
    """The events a ``Selective`` projection reads now: every event of ``tenants`` but
    those from ``ignored_sources``, and every event of ``types`` (whichever tenant and
    source); an event of ``types`` ends its batch."""

    tenants: tuple[str, ...]
    types: tuple[str, ...]
    ignored_sources: tuple[str, ...] = ()


@runtime_checkable
class Selective(Protocol):
    async def selection(self, conn: AsyncConnection) -> Selection:
        """What to read from here on; called in the batch's transaction, before ``apply``."""
        ...


@runtime_checkable
class Flushing(Protocol):
    async def flush(self, conn: AsyncConnection) -> None:
        """Write what this batch's ``apply`` calls kept in memory; called once per batch,
        in its transaction, before the checkpoint moves (and at the end of a rebuild).
        A failure that belongs to one event raises ``FlushFailed`` with its position, so
        the projection stops at that event, as a failing ``apply`` would."""
        ...


class FlushFailed(Exception):
    """A ``flush`` that failed on the event at ``position`` (its cause says why)."""

    def __init__(self, position: int) -> None:
        super().__init__(f"flush failed at position {position}")
        self.position = position


def quiet_types(projection: Projection) -> frozenset[str]:
    """The types whose appends alone never wake ``projection`` (see the module's
    docstring): none unless it says ``quiet_types``."""
    return frozenset(getattr(projection, "quiet_types", ()))


def narrowing(projection: Projection) -> ColumnElement[bool] | None:
    """The condition on ``events`` that ``projection``'s reads add (see the module's
    docstring), or None."""
    return getattr(projection, "reads_only", None)


def reads_reserved(projection: Projection) -> bool:
    """Whether ``projection`` reads the events Causeway writes itself (see the module's
    docstring); every projection does unless it says ``reads_reserved = False``."""
    return bool(getattr(projection, "reads_reserved", True))
