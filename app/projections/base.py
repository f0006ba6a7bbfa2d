"""What a projection is: a named handler over events in position order.

Its read-model writes and its checkpoint commit in one transaction, so each event takes
effect exactly once, whatever crashes in between. ``tables`` are the read model (a rebuild
empties them); ``types`` are the event types it reads (others only move its checkpoint
forward; ``None``: every event). Handlers must be deterministic: a rebuild from position 0
gives the same state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.graph import StoredEvent


class Projection(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def tables(self) -> Sequence[Table]: ...

    @property
    def types(self) -> frozenset[str] | None: ...

    async def apply(self, conn: AsyncConnection, event: StoredEvent) -> None: ...
