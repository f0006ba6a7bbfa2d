"""The model registry over HTTP: register versions with signatures, set aliases, read.

Writes are events (``causeway.model.*``) appended like any other, so they carry lineage
and the registry read model is rebuilt from them. Ingest checks events against the
registrations in the log, so a version can be used the moment its registration answers.
Reads come from the read model, which follows the log within a poll interval.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.ext.asyncio import AsyncEngine

from app.errors import BadRequest, Conflict, IdConflict, NotFound
from app.store.append.group_commit import Appender
from app.store.keys import Principal, Scope
from app.store.model_registry import Signature, alias_event, is_valid_name, registration_event
from app.store.model_registry_reads import (
    Model,
    RegistryReader,
    fetch_alias_target,
    fetch_registered_digest,
)
from app.store.records import Text
from app.web.bodies import JSONRoute
from app.web.dependencies import engine_of, require

router = APIRouter(tags=["models"], route_class=JSONRoute)
_admin = require(Scope.ADMIN)
_read = require(Scope.READ)


class RegisterVersion(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str = Field(min_length=1, max_length=128)
    signature: Signature
    tags: dict[Text, Text] = Field(default_factory=dict)
    enforce_outputs: bool = False


class SetAlias(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str = Field(min_length=1, max_length=128)


def appender_of(request: Request) -> Appender:
    appender: Appender = request.app.state.appender
    return appender


def _check_names(*names: str) -> None:
    for text in names:
        if not is_valid_name(text):
            raise BadRequest(
                f"{text!r} is not a valid name: 1-128 of letters, digits, '_', '.', '-'"
            )


@router.post("/models/{name}/versions", status_code=201, summary="Register a model version")
async def register_version(
    name: str,
    body: RegisterVersion,
    principal: Annotated[Principal, Depends(_admin)],
    engine: Annotated[AsyncEngine, Depends(engine_of)],
    appender: Annotated[Appender, Depends(appender_of)],
) -> JSONResponse:
    _check_names(name, body.version)
    digest = body.signature.digest()
    async with engine.connect() as conn:
        stored = await fetch_registered_digest(conn, principal.tenant, name, body.version)
    if stored is not None and stored != digest:
        raise _registered_otherwise(name, body.version, stored, digest)
    event = registration_event(
        name, body.version, body.signature, body.tags, enforce_outputs=body.enforce_outputs
    )
    try:
        [appended] = await appender.append(principal.tenant, [event])
    except IdConflict:
        # Registered before with the same signature and other tags or enforce_outputs, or
        # meanwhile (a concurrent registration): the log refuses it in its own terms.
        async with engine.connect() as conn:
            stored = await fetch_registered_digest(conn, principal.tenant, name, body.version)
        raise _registered_otherwise(name, body.version, stored or digest, digest) from None
    answer = {
        "name": name,
        "version": body.version,
        "signature_digest": digest,
        "position": appended.position,
        "duplicate": appended.duplicate,
    }
    return JSONResponse(answer, status_code=200 if appended.duplicate else 201)


def _registered_otherwise(name: str, version: str, stored: str, digest: str) -> Conflict:
    if stored != digest:
        what = f"with signature {stored}; this one is {digest}"
    else:
        what = "with the same signature but other tags or enforce_outputs"
    return Conflict(
        f"model {name!r} version {version!r} is registered {what}. A registration does not "
        "change: register a new version instead.",
        registered=stored,
        sent=digest,
    )


@router.put("/models/{name}/aliases/{alias}", summary="Point an alias at a registered version")
async def set_alias(
    name: str,
    alias: str,
    body: SetAlias,
    principal: Annotated[Principal, Depends(_admin)],
    engine: Annotated[AsyncEngine, Depends(engine_of)],
    appender: Annotated[Appender, Depends(appender_of)],
) -> dict[str, Any]:
    _check_names(name, alias)
    async with engine.connect() as conn:
        stored = await fetch_registered_digest(conn, principal.tenant, name, body.version)
    if stored is None:
        raise NotFound(f"model {name!r} has no registered version {body.version!r}")
    event = alias_event(name, alias, body.version, uuid.uuid4().int)
    [appended] = await appender.append(principal.tenant, [event])
    return {"name": name, "alias": alias, "version": body.version, "position": appended.position}


@router.delete("/models/{name}/aliases/{alias}", summary="Remove an alias")
async def remove_alias(
    name: str,
    alias: str,
    principal: Annotated[Principal, Depends(_admin)],
    engine: Annotated[AsyncEngine, Depends(engine_of)],
    appender: Annotated[Appender, Depends(appender_of)],
) -> dict[str, Any]:
    _check_names(name, alias)
    async with engine.connect() as conn:
        if await fetch_alias_target(conn, principal.tenant, name, alias) is None:
            raise NotFound(f"model {name!r} has no alias {alias!r}")
    [appended] = await appender.append(
        principal.tenant, [alias_event(name, alias, None, uuid.uuid4().int)]
    )
    return {"name": name, "alias": alias, "version": None, "position": appended.position}


@router.get("/models", summary="Registered models with their versions and aliases")
async def list_models(
    principal: Annotated[Principal, Depends(_read)],
    engine: Annotated[AsyncEngine, Depends(engine_of)],
) -> dict[str, Any]:
    async with engine.connect() as conn:
        found = await RegistryReader(conn).read_models(principal.tenant)
    return {"models": [_model(m) for m in found]}


@router.get("/models/{name}", summary="One model: versions, signatures, tags, aliases")
async def read_model(
    name: str,
    principal: Annotated[Principal, Depends(_read)],
    engine: Annotated[AsyncEngine, Depends(engine_of)],
) -> dict[str, Any]:
    async with engine.connect() as conn:
        found = await RegistryReader(conn).read_models(principal.tenant, name)
    if not found:
        raise NotFound(f"no model {name!r}", model=name)
    return _model(found[0])


def _model(model: Model) -> dict[str, Any]:
    return {
        "name": model.name,
        "aliases": model.aliases,
        "versions": [
            {
                "version": v.version,
                "signature": v.signature,
                "signature_digest": v.signature_digest,
                "tags": v.tags,
                "enforce_outputs": v.enforce_outputs,
                "registered_at": v.registered_at.isoformat(),
                "position": v.position,
            }
            for v in model.versions
        ],
    }
