"""Deployments over HTTP: rollout, traffic, promote and rollback commands (scope admin),
the read model (now, as of a time, history) and a server-sent event stream of changes.

A command reads the service's state from its stream in the log, checks the transition,
and appends one ``causeway.deployment.*`` event expecting that stream version, so two
commands racing on one service cannot both win (the loser gets 409). A command sent with
an ``Idempotency-Key`` (``app.web.idempotency``) and sent again is answered as the first
was, and stores nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from app.db.engine import Connector, Engine
from app.db.tenancy import tenant_transaction
from app.errors import BadRequest, Conflict, IdempotencyKeyReused, NotFound, VersionConflict
from app.projections.deployments import Deployments
from app.store.deployment_commands import Applied, DeploymentCommands
from app.store.deployment_commands import Rollout as StoreRollout
from app.store.deployment_reads import Change, DeploymentReader, DeploymentView
from app.store.deployments import DeploymentState
from app.store.keys import Principal, Scope
from app.store.log import read_head_link
from app.store.model_registry import NAME_PATTERN
from app.store.records import MAX_POSITION, Integer, Text, parse_position
from app.store.timestamps import parse_time_parameter
from app.web.bodies import json_route
from app.web.dependencies import (
    PLAIN_DIGITS,
    engine_of,
    read_model_reads,
    require,
    still_authorized,
)
from app.web.idempotency import IdempotencyKey
from app.web.openapi import TIME_FORMAT, Name, answers
from app.web.reads import POSITION_HEADER

router = APIRouter(tags=["deployments"], route_class=json_route(Scope.ADMIN))
_admin = require(Scope.ADMIN)
_read = require(Scope.READ)
_WATCH_POLL_S = 0.25
_KEEPALIVE_S = 15.0


class Rollout(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(pattern=NAME_PATTERN)
    version: str = Field(pattern=NAME_PATTERN)
    percent: Integer = Field(default=10, ge=0, le=100)
    strategy: Literal["canary", "rolling"] = "canary"
    force: StrictBool = False
    reason: Text | None = Field(default=None, max_length=500)


# The version a command is meant for, when its sender names it: acting on another (the
# state changed since the sender looked, or this is a retry of a command that went
# through) is a 409, not a shift, promotion or rollback of a version nobody chose.
_MEANT_FOR = Field(
    default=None,
    pattern=NAME_PATTERN,
    description="the candidate (for rollback: the version it drops) this command is meant "
    "for; when another, the command is refused with 409",
)


class Traffic(BaseModel):
    model_config = ConfigDict(extra="forbid")
    percent: Integer = Field(ge=0, le=100)
    version: str | None = _MEANT_FOR
    reason: Text | None = Field(default=None, max_length=500)


class Promote(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str | None = _MEANT_FOR
    reason: Text | None = Field(default=None, max_length=500)


class Rollback(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str | None = _MEANT_FOR
    reason: Text = Field(min_length=1, max_length=500)


def commands_of(request: Request) -> DeploymentCommands:
    return DeploymentCommands(request.app.state.engine, request.app.state.appender)


Admin = Annotated[Principal, Depends(_admin)]
Database = Annotated[Engine, Depends(engine_of)]
Commands = Annotated[DeploymentCommands, Depends(commands_of)]
ReadModel = Annotated[Connector, Depends(read_model_reads(Deployments.name))]


def _applied_json(applied: Applied, response: Response) -> dict[str, Any]:
    response.headers[POSITION_HEADER] = str(applied.position)
    return {**_state_json(applied.state), "position": applied.position}


# A command reads the service's state and appends expecting its version: a transition the
# state does not allow, or a command that lost a race, is a 409.
_COMMAND = answers(Conflict, VersionConflict, IdempotencyKeyReused)


@router.post(
    "/deployments/{service}/rollouts",
    summary="Start a canary or rolling rollout",
    responses=answers(NotFound, Conflict, VersionConflict, IdempotencyKeyReused),
)
async def start_rollout(
    service: Name,
    body: Rollout,
    principal: Admin,
    commands: Commands,
    response: Response,
    key: IdempotencyKey,
) -> dict[str, Any]:
    rollout = StoreRollout(
        model=body.model,
        version=body.version,
        percent=body.percent,
        strategy=body.strategy,
        reason=body.reason,
        force=body.force,
    )
    applied = await commands.start_rollout(
        principal.tenant, service, rollout, actor=principal.key_id, key=key
    )
    return _applied_json(applied, response)


@router.post(
    "/deployments/{service}/traffic",
    summary="Shift the candidate's traffic share",
    responses=_COMMAND,
)
async def shift_traffic(
    service: Name,
    body: Traffic,
    principal: Admin,
    commands: Commands,
    response: Response,
    key: IdempotencyKey,
) -> dict[str, Any]:
    applied = await commands.shift_traffic(
        principal.tenant,
        service,
        percent=body.percent,
        reason=body.reason,
        actor=principal.key_id,
        version=body.version,
        key=key,
    )
    return _applied_json(applied, response)


@router.post(
    "/deployments/{service}/promote",
    summary="Make the candidate the stable version",
    responses=_COMMAND,
)
async def promote(
    service: Name,
    principal: Admin,
    commands: Commands,
    response: Response,
    key: IdempotencyKey,
    body: Promote | None = None,
) -> dict[str, Any]:
    body = body or Promote()  # the body is optional
    applied = await commands.promote(
        principal.tenant,
        service,
        reason=body.reason,
        actor=principal.key_id,
        version=body.version,
        key=key,
    )
    return _applied_json(applied, response)


@router.post(
    "/deployments/{service}/rollback",
    summary="Drop the candidate, or restore the previous stable",
    responses=_COMMAND,
)
async def rollback(
    service: Name,
    body: Rollback,
    principal: Admin,
    commands: Commands,
    response: Response,
    key: IdempotencyKey,
) -> dict[str, Any]:
    applied = await commands.rollback(
        principal.tenant,
        service,
        reason=body.reason,
        actor=principal.key_id,
        version=body.version,
        key=key,
    )
    return _applied_json(applied, response)


@router.get("/deployments", summary="Every service's deployment state")
async def list_deployments(
    principal: Annotated[Principal, Depends(_read)], engine: ReadModel
) -> dict[str, Any]:
    async with engine.connect() as conn:
        found = await DeploymentReader(conn).read_deployments(principal.tenant)
    return {"deployments": [_view_json(v) for v in found]}


@router.get(
    "/deployments/{service}",
    summary="A service's state and history, now or as of ?at=",
    responses=answers(NotFound),
)
async def read_deployment(
    service: Name,
    principal: Annotated[Principal, Depends(_read)],
    engine: ReadModel,
    at: Annotated[
        str | None,
        Query(description="RFC 3339: the state at that time", json_schema_extra=TIME_FORMAT),
    ] = None,
) -> dict[str, Any]:
    when = parse_time_parameter("at", at)
    async with engine.connect() as conn:
        reader = DeploymentReader(conn)
        view = await reader.read_deployment(principal.tenant, service)
        if view is None:
            raise NotFound(f"no deployment for service {service!r}", service=service)
        history = await reader.read_history(
            principal.tenant, service, at=when, through=view.position
        )
    if when is None:
        return {**_view_json(view), "history": [_change_json(c) for c in history]}
    if not history:
        raise NotFound(f"service {service!r} had no deployment at {at}", service=service)
    last = history[-1]
    state = DeploymentState(
        service, last.model, last.stable_version, last.candidate_version, last.candidate_percent
    )
    return {**_state_json(state), "at": at, "since": last.at.isoformat(), "position": last.position}


@router.get(
    "/deployments/{service}/watch",
    summary="Server-sent events: each change to the service, as it is appended",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}, **answers(Conflict)},
)
async def watch(
    service: Name,
    request: Request,
    principal: Annotated[Principal, Depends(_read)],
    engine: Database,
    after: Annotated[
        int | None,
        Query(ge=0, le=MAX_POSITION, description="resume after this position"),
        PLAIN_DIGITS,
    ] = None,
) -> StreamingResponse:
    # Last-Event-ID first: an EventSource reconnects to the same URL, after= and all, and
    # names the last change it saw in the header.
    start = _last_event_id(request.headers.get("last-event-id"))
    if start is None:
        start = after
    if start:
        async with engine.connect() as conn:
            head, _ = await read_head_link(conn)
        if start > head:
            # Never sent by this log (another deployment's, or one restored to an earlier
            # point since): resumed there, the watch would say nothing until the log
            # passed it, every change before that unseen.
            raise Conflict(
                f"position {start} is past the log's head ({head}): read the deployment "
                "again and watch without Last-Event-ID or after",
                position=start,
            )
    if start is None:
        async with tenant_transaction(engine, principal.tenant) as conn:
            latest = await DeploymentReader(conn).read_changes_after(principal.tenant, service, 0)
        start = latest[-1].position if latest else 0
    return StreamingResponse(
        _changes(request, engine, principal.tenant, service, start),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache"},
    )


def _last_event_id(header: str | None) -> int | None:
    """The position a ``Last-Event-ID`` names; a ``BadRequest`` for one that names none
    (an id this stream never sent: starting from now would skip changes unseen)."""
    if header is None or header == "":
        return None
    found = parse_position(header)
    if found is None:
        raise BadRequest(f"Last-Event-ID {header!r} is not a position this stream sent")
    return found


async def _changes(
    request: Request, engine: Database, tenant: str, service: str, after: int
) -> AsyncIterator[bytes]:
    idle = 0.0
    # The id where the stream starts, before any change: a client that drops before the
    # first change reconnects from here (Last-Event-ID), not from whatever is newest then.
    yield f": watching\nid: {after}\n\n".encode()
    while not await request.is_disconnected():
        if not await still_authorized(request, Scope.READ):
            return  # the key was revoked: a reconnect is answered 401
        async with tenant_transaction(engine, tenant) as conn:
            found = await DeploymentReader(conn).read_changes_after(tenant, service, after)
        for change in found:
            payload = {
                "type": change.type,
                "position": change.position,
                "storedtime": change.recorded_at.isoformat(),
                **change.data,
            }
            yield (
                f"id: {change.position}\nevent: {change.type}\n".encode()
                + b"data: "
                + orjson.dumps(payload)
                + b"\n\n"
            )
            after = change.position
        idle = 0.0 if found else idle + _WATCH_POLL_S
        if idle >= _KEEPALIVE_S:
            idle = 0.0
            yield b": keep-alive\n\n"
        await asyncio.sleep(_WATCH_POLL_S)


def _state_json(state: DeploymentState) -> dict[str, Any]:
    return {
        "service": state.service,
        "model": state.model,
        "status": state.status,
        "stable_version": state.stable_version,
        "candidate_version": state.candidate_version,
        "candidate_percent": state.candidate_percent,
        "traffic": state.traffic(),
    }


def _view_json(view: DeploymentView) -> dict[str, Any]:
    state = DeploymentState(
        view.service,
        view.model,
        view.stable_version,
        view.candidate_version,
        view.candidate_percent,
    )
    return {
        **_state_json(state),
        "updated_at": view.updated_at.isoformat(),
        "position": view.position,
    }


def _change_json(change: Change) -> dict[str, Any]:
    return {
        "position": change.position,
        "at": change.at.isoformat(),
        "action": change.action,
        "stable_version": change.stable_version,
        "candidate_version": change.candidate_version,
        "candidate_percent": change.candidate_percent,
        "reason": change.reason,
        "actor": change.actor,
        "event_id": change.event_id,
    }
