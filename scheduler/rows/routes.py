"""The ``routes`` table (the routing table the dispatcher keeps) and ``prewarm_windows``
(each source's recent matching events, per route with a pre-warm rule).

Both are written only by the dispatcher, in the runner's transaction; a route's row holds
its definition as logged, with the position it took effect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import prewarm_windows, routes

TABLES = (routes, prewarm_windows)  # what the dispatcher projects to; a rebuild empties them
_w = prewarm_windows.c


@dataclass(frozen=True, slots=True)
class PrewarmKey:
    tenant: str
    route_id: str
    source: str


async def read_routed_tenants(conn: AsyncConnection) -> list[str]:
    """Every tenant with a route, in order."""
    tenants = (await conn.execute(select(routes.c.tenant).distinct())).scalars()
    return sorted(tenants)


async def read_specs(conn: AsyncConnection, tenant: str) -> list[dict[str, Any]]:
    """The tenant's route definitions, by id."""
    rows = await conn.execute(
        select(routes.c.spec).where(routes.c.tenant == tenant).order_by(routes.c.id)
    )
    return [row.spec for row in rows]


async def read_routes(conn: AsyncConnection, tenant: str) -> list[dict[str, Any]]:
    """Every route as the dispatcher applies them (with the position it took effect)."""
    rows = await conn.execute(
        select(routes.c.spec, routes.c.position)
        .where(routes.c.tenant == tenant)
        .order_by(routes.c.id)
    )
    return [{**row.spec, "position": row.position} for row in rows]


async def write_route(
    conn: AsyncConnection, tenant: str, route_id: str, spec: dict[str, Any], *, position: int
) -> None:
    values = {"spec": spec, "position": position}
    await conn.execute(
        insert(routes)
        .values(tenant=tenant, id=route_id, **values)
        .on_conflict_do_update(index_elements=["tenant", "id"], set_=values)
    )


async def delete_route(conn: AsyncConnection, tenant: str, route_id: str) -> None:
    await conn.execute(delete(routes).where(routes.c.tenant == tenant, routes.c.id == route_id))


async def read_spec(conn: AsyncConnection, tenant: str, route_id: str) -> dict[str, Any] | None:
    """The route's stored definition; None when it has none."""
    found = await conn.execute(
        select(routes.c.spec).where(routes.c.tenant == tenant, routes.c.id == route_id)
    )
    row = found.one_or_none()
    return None if row is None else dict(row.spec)


async def delete_prewarm_windows(conn: AsyncConnection, tenant: str, route_id: str) -> None:
    """Forget what the route's pre-warm windows counted (its definition changed or went)."""
    await conn.execute(delete(prewarm_windows).where(_w.tenant == tenant, _w.route_id == route_id))


async def fetch_prewarm_window(conn: AsyncConnection, key: PrewarmKey) -> list[Any]:
    """The window's recent ``[event id, time in µs]`` pairs, its row locked (none yet: [])."""
    row = (
        await conn.execute(
            select(_w.recent)
            .filter_by(tenant=key.tenant, route_id=key.route_id, source=key.source)
            .with_for_update()
        )
    ).one_or_none()
    return list(row.recent) if row is not None else []


async def write_prewarm_window(conn: AsyncConnection, key: PrewarmKey, recent: list[Any]) -> None:
    await conn.execute(
        insert(prewarm_windows)
        .values(tenant=key.tenant, route_id=key.route_id, source=key.source, recent=recent)
        .on_conflict_do_update(
            index_elements=["tenant", "route_id", "source"], set_={"recent": recent}
        )
    )
