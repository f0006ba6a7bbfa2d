"""``POST/GET/DELETE /routes``: which events become which tasks (``scheduler.routes``),
defined and deleted by appending to the route's stream (scope ``admin``)."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field

from app.db.engine import Engine
from app.db.tenancy import tenant_transaction
from app.errors import NotFound
from app.store.append.group_commit import Appender
from app.store.keys import Principal, Scope
from app.store.records import EXACT_LIMIT, Text
from app.web.bodies import json_route
from app.web.openapi import answers
from scheduler import routes as r
from scheduler.route_reads import RouteReader
from scheduler.web import POSITION_HEADER, PrincipalOf, Settle, routes_settled

# What ``scheduler.routes.parse_new_route`` accepts, as JSON Schema: the body of ``POST
# /routes`` in the OpenAPI document. The parser's own rules, spelt with its patterns.
# Whitespace is Python's (``str.isspace``, which ``\s`` and ``strip`` use), named in full.
_WS = "[\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"
_ATTR = r.ATTRIBUTE
# ``in`` and ``exists`` are matched ignoring case, where Python folds "\u0130" and "\u0131"
# to i, "\u017f" to s and "\u212a" (Kelvin) to k.
_I, _S = "[Ii\u0130\u0131]", "[Ss\u017f]"
_ATTR_ANY_CASE = (
    "(?:(?:[Ee][Xx][Tt]|[Dd][Aa][Tt][Aa])\\.)?[A-Za-z0-9_\\-\u0130\u0131\u017f\u212a]{1,128}"
)
_VALUES = "[^\\n\\x00]*[^\\n\\x00," + _WS[1:-1] + "][^\\n\\x00]*"  # a route holds no U+0000
_PREDICATE = (
    f"^(?:{_WS}*{_ATTR_ANY_CASE}{_WS}+(?:[Nn][Oo][Tt]{_WS}+)?{_I}[Nn]{_WS}*\\(({_VALUES})\\){_WS}*"
    f"|{_WS}*{_ATTR_ANY_CASE}{_WS}+(?:[Nn][Oo][Tt]{_WS}+)?[Ee][Xx]{_I}{_S}[Tt]{_S}{_WS}*"
    f"|{_WS}*{_ATTR}{_WS}*!?={_WS}*[^\\n\\x00]*{_WS}*)$"
)
_NO_NUL = {"type": "string", "pattern": "^[^\\x00]*$"}
_NAME = {"type": "string", "pattern": r.NAME_PATTERN}
_UNROUTABLE = "^(?:" + "|".join(p.replace(".", "\\.") for p in r.UNROUTABLE) + ")"
_TYPE = {
    "type": "string",
    "pattern": "^[^\\x00]*[^\\x00*][^\\x00]*$",
    "not": {"pattern": _UNROUTABLE},
}
_TYPES = {"anyOf": [{"type": "array", "items": _TYPE, "minItems": 1}, _TYPE]}


def _number(low: float, high: float, *, integer: bool = False) -> dict[str, Any]:
    return {"type": "integer" if integer else "number", "minimum": low, "maximum": high}


ROUTE_SCHEMA: dict[str, Any] = {
    "title": "Route",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "id": _NAME,
        "types": {**_TYPES, "description": "event types; 'prefix.*' matches a prefix"},
        "type": {**_TYPES, "description": "the same as types (one of the two)"},
        "where": {
            "type": "array",
            "items": {"type": "string", "pattern": _PREDICATE},
            "description": "NAME=VALUE, NAME!=VALUE, NAME in (A, B), NAME exists, NAME not exists",
        },
        "kind": {"anyOf": [_NAME, {"type": "null"}]},
        "queue": {"anyOf": [_NAME, {"type": "null"}]},
        "priority": {"anyOf": [_number(0, 9, integer=True), {"type": "null"}]},
        "requires": {
            "type": "object",
            "propertyNames": _NO_NUL,
            "properties": {
                "labels": {
                    "type": "object",
                    "propertyNames": _NO_NUL,
                    "additionalProperties": _NO_NUL,
                }
            },
            "additionalProperties": {
                "anyOf": [
                    {"type": "boolean"},
                    {"type": "number", "minimum": 0, "exclusiveMaximum": EXACT_LIMIT},
                ]
            },
            "description": "e.g. {'gpu_memory_gb': 8, 'fp16': true, 'labels': {'zone': 'a'}}",
        },
        "debounce": {
            "anyOf": [
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["key", "window_s"],
                    "properties": {
                        "key": {"type": "string", "pattern": f"^{_ATTR}$"},
                        "window_s": _number(0.001, 86_400.0),
                    },
                },
                {"type": "null"},
            ]
        },
        # null: the default (3 retries, 1 second)
        "max_retries": {"anyOf": [_number(0, 100, integer=True), {"type": "null"}]},
        "backoff_base_s": {"anyOf": [_number(0.0, 3600.0), {"type": "null"}]},
        "service": {"anyOf": [_NAME, {"type": "null"}]},
        "on_model_mismatch": {"anyOf": [{"enum": list(r.ON_MODEL_MISMATCH)}, {"type": "null"}]},
        "prewarm": {
            "anyOf": [
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["model", "count", "within_s"],
                    "properties": {
                        "model": {"type": "string", "pattern": "^[^\\x00]+$"},
                        "count": _number(1, 10_000, integer=True),
                        "within_s": _number(0.001, 86_400.0),
                    },
                },
                {"type": "null"},
            ]
        },
    },
    "required": ["id"],
    "allOf": [
        # types or its alias type, not both
        {"oneOf": [{"required": ["types"]}, {"required": ["type"]}]},
        # it makes tasks (kind and queue), pre-warms, or both
        {
            "anyOf": [
                {
                    "required": ["kind", "queue"],
                    "properties": {"kind": {"type": "string"}, "queue": {"type": "string"}},
                },
                {
                    "required": ["prewarm"],
                    "properties": {
                        "prewarm": {"type": "object"},
                        "kind": {"type": "null"},
                        "queue": {"type": "null"},
                    },
                },
            ]
        },
        # rolling back on a model mismatch needs the service to roll back
        {
            "if": {
                "required": ["on_model_mismatch"],
                "properties": {"on_model_mismatch": {"const": "rollback"}},
            },
            "then": {"required": ["service"], "properties": {"service": {"type": "string"}}},
        },
    ],
}


class DeleteRoute(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: Text | None = Field(default=None, max_length=500)


def create_router(engine: Engine, appender: Appender, admin: PrincipalOf) -> APIRouter:
    router = APIRouter(tags=["scheduler"], route_class=json_route(Scope.ADMIN))
    Admin = Annotated[Principal, Depends(admin)]
    Settled = Annotated[Settle, Depends(routes_settled(admin))]

    @router.post(
        "/routes",
        status_code=201,
        summary="Define (or redefine) a route",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ROUTE_SCHEMA}},
            }
        },
    )
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
    )
    async def list_routes(principal: Admin, settled: Settled) -> dict[str, Any]:
        await settled()
        async with tenant_transaction(engine, principal.tenant) as conn:
            return {"routes": await RouteReader(conn).read_routes(principal.tenant)}

    @router.get(
        "/routes/{route_id}",
        summary="One route",
        responses=answers(NotFound),
    )
    async def read_route(route_id: str, principal: Admin, settled: Settled) -> dict[str, Any]:
        _refuse_impossible(route_id)  # at once: no wait for a route that cannot be
        await settled()
        return await _route(route_id, principal.tenant)

    @router.delete(
        "/routes/{route_id}", summary="Stop routing by this route", responses=answers(NotFound)
    )
    async def delete_route(
        route_id: str, principal: Admin, response: Response, body: DeleteRoute | None = None
    ) -> dict[str, Any]:
        await _route(route_id, principal.tenant)
        reason = body.reason if body else None
        event = r.delete_event(route_id, reason=reason, actor=principal.key_id)
        [appended] = await appender.append(principal.tenant, [event])
        response.headers[POSITION_HEADER] = str(appended.position)
        return {"id": route_id, "deleted": True, "position": appended.position}

    def _refuse_impossible(route_id: str) -> None:
        if not r.NAME.match(route_id):  # POST /routes refuses such an id: none has it
            raise NotFound(f"no route {route_id!r}", route=route_id)

    async def _route(route_id: str, tenant: str) -> dict[str, Any]:
        _refuse_impossible(route_id)
        async with tenant_transaction(engine, tenant) as conn:
            found = await RouteReader(conn).read_route(tenant, route_id)
        if found is None:
            raise NotFound(f"no route {route_id!r}", route=route_id)
        return found

    return router
