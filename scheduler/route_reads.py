"""Reads of the routing table, and of a route's own stream when the table may lag."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import events, routes
from scheduler.routes import DEFINED, stream_of


class RouteReader:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def read_routes(self, tenant: str) -> list[dict[str, Any]]:
        """Every route as the dispatcher applies them (with the position it took effect)."""
        rows = await self._conn.execute(
            select(routes.c.spec, routes.c.position)
            .where(routes.c.tenant == tenant)
            .order_by(routes.c.id)
        )
        return [{**row.spec, "position": row.position} for row in rows]

    async def read_route(self, tenant: str, route_id: str) -> dict[str, Any] | None:
        """The route's latest definition from its stream in the log (so one defined a
        moment ago is found before the dispatcher has applied it); None once deleted."""
        row = (
            await self._conn.execute(
                select(events.c.type, events.c.data, events.c.position)
                .where(events.c.tenant == tenant, events.c.stream == stream_of(route_id))
                .order_by(events.c.stream_version.desc())
                .limit(1)
            )
        ).one_or_none()
        if row is None or row.type != DEFINED:
            return None
        return {**row.data, "position": row.position}
