"""Reads of routes: the routing table as the dispatcher applies it, and a route's own
stream in the log, for when the table may lag a definition made a moment ago."""

from __future__ import annotations

from typing import Any

from app.db.engine import Connection
from app.store.decision_reads import read_last
from scheduler.routes import DEFINED, stream_of
from scheduler.rows import routes as rows


class RouteReader:
    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    async def read_routes(self, tenant: str) -> list[dict[str, Any]]:
        """Every route as the dispatcher applies them (with the position it took effect)."""
        return await rows.read_routes(self._conn, tenant)

    async def read_route(self, tenant: str, route_id: str) -> dict[str, Any] | None:
        """The route's latest definition from its stream in the log (so one defined a
        moment ago is found before the dispatcher has applied it); None once deleted."""
        last = await read_last(self._conn, tenant, stream_of(route_id))
        if last is None or last.type != DEFINED:
            return None
        return {**last.data, "position": last.position}
