"""``POST/GET/DELETE /routes``: which events become which tasks (``scheduler.routes``),
defined and deleted by appending to the route's stream (scope ``admin``)."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field

from app.db.engine import Engine
from app.errors import NotFound
from app.store.append.group_commit import Appender
from app.store.keys import Principal
from app.store.records import Text
from app.web.bodies import JSONRoute
from scheduler import routes as r
from scheduler.route_reads import RouteReader
from scheduler.web import POSITION_HEADER, ROUTES_SETTLED, PrincipalOf


class DeleteRoute(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: Text | None = Field(default=None, max_length=500)


def create_router(engine: Engine, appender: Appender, admin: PrincipalOf) -> APIRouter:
    router = APIRouter(tags=["scheduler"], route_class=JSONRoute)
    Admin = Annotated[Principal, Depends(admin)]

    @router.post("/routes", status_code=201, summary="Define (or redefine) a route")
    async def define_route(
        body: dict[str, Any], principal: Admin, response: Response
    ) -> dict[str, Any]:
        route = r.parse_new_route(body)
        [appended] = await appender.append(principal.tenant, [r.define_event(route)])
        response.headers[POSITION_HEADER] = str(appended.position)
        return {
            "route": route.as_json(),
            "position": appended.position,
            "detail": f"events after position {appended.position} are routed by it",
        }

    @router.get(
        "/routes",
        summary="Every route of the tenant, as the dispatcher applies them",
        dependencies=ROUTES_SETTLED,
    )
    async def list_routes(principal: Admin) -> dict[str, Any]:
        async with engine.connect() as conn:
            return {"routes": await RouteReader(conn).read_routes(principal.tenant)}

    @router.get("/routes/{route_id}", summary="One route")
    async def read_route(route_id: str, principal: Admin) -> dict[str, Any]:
        return await _route(route_id, principal.tenant)

    @router.delete("/routes/{route_id}", summary="Stop routing by this route")
    async def delete_route(
        route_id: str, principal: Admin, response: Response, body: DeleteRoute | None = None
    ) -> dict[str, Any]:
        await _route(route_id, principal.tenant)
        reason = body.reason if body else None
        event = r.delete_event(route_id, reason=reason, actor=principal.key_id)
        [appended] = await appender.append(principal.tenant, [event])
        response.headers[POSITION_HEADER] = str(appended.position)
        return {"id": route_id, "deleted": True, "position": appended.position}

    async def _route(route_id: str, tenant: str) -> dict[str, Any]:
        async with engine.connect() as conn:
            found = await RouteReader(conn).read_route(tenant, route_id)
        if found is None:
            raise NotFound(f"no route {route_id!r}", route=route_id)
        return found

    return router
