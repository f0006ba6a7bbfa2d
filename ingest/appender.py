"""Appends one request's events in one transaction, through ``app.store``'s ``EventLog``.

Each request is one atomic append: everything in it is stored, or nothing is.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from app.store.log import EventLog
from app.store.records import Appended, NewEvent


class Appender:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def append(self, tenant: str, batch: Sequence[NewEvent]) -> list[Appended]:
        if not batch:
            return []
        async with self._engine.begin() as conn:
            return await EventLog(conn).append(tenant, batch)
