"""The model registry over HTTP: register versions with signatures, set aliases, read.

Writes are events (``causeway.model.*``) appended like any other, so they carry lineage
and the registry read model is rebuilt from them. Ingest checks events against the
registrations in the log, so a version can be used the moment its registration answers.
Reads come from the read model, which follows the log within a poll interval.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool

from app.db.engine import Connector
from app.errors import Conflict, NotFound
from app.projections.model_registry import ModelRegistry
from app.store.keys import Principal, Scope
from app.store.model_commands import ModelCommands
from app.store.model_registry import NAME_PATTERN, Signature
from app.store.model_registry_reads import Model, RegistryReader
from app.store.records import Text
from app.web.bodies import json_route
from app.web.dependencies import read_model_reads, require
from app.web.openapi import Name, answers
from app.web.reads import POSITION_HEADER

router = APIRouter(tags=["models"], route_class=json_route(Scope.ADMIN))
_admin = require(Scope.ADMIN)
_read = require(Scope.READ)
_registry = read_model_reads(ModelRegistry.name)


def _uuid(text: str) -> str:
    # A ValueError names it as invalid; kept in its canonical form, as the store keys runs
    # (app.store.openlineage.run_key): lower case, hyphenated.
    return str(uuid.UUID(text))


# An OpenLineage runId (a UUID), as the run's events write it
RunId = Annotated[str, AfterValidator(_uuid), Field(json_schema_extra={"format": "uuid"})]


class RegisterVersion(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str = Field(pattern=NAME_PATTERN)
    signature: Signature
    # A key of a tag is text too: one holding NUL is refused, whatever its value (said in
    # the document, where patternProperties alone left other keys to any value).
    tags: dict[Text, Text] = Field(
        default_factory=dict, json_schema_extra={"additionalProperties": False}
    )
    enforce_outputs: StrictBool = False
    training_run: RunId | None = Field(
        default=None, description="The runId of the OpenLineage run that trained this version"
    )


class LinkTrainingRun(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_id: RunId = Field(description="The runId of an OpenLineage run that trained the version")


class SetAlias(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str = Field(pattern=NAME_PATTERN)


def commands_of(request: Request) -> ModelCommands:
    return ModelCommands(request.app.state.engine, request.app.state.appender)


Commands = Annotated[ModelCommands, Depends(commands_of)]


@router.post(
    "/models/{name}/versions",
    status_code=201,
    summary="Register a model version",
    responses={200: {"description": "registered before, exactly so"}, **answers(Conflict)},
)
async def register_version(
    name: Name,
    body: RegisterVersion,
    principal: Annotated[Principal, Depends(_admin)],
    commands: Commands,
) -> JSONResponse:
    registered = await commands.register(
        principal.tenant,
        name,
        body.version,
        body.signature,
        body.tags,
        enforce_outputs=body.enforce_outputs,
    )
    appended = registered.appended
    answer: dict[str, Any] = {
        "name": name,
        "version": body.version,
        "signature_digest": registered.signature_digest,
        "position": appended.position,
        "duplicate": appended.duplicate,
    }
    if body.training_run is not None:
        linked = await commands.link_training_run(
            principal.tenant, name, body.version, body.training_run
        )
        answer |= {"training_run": body.training_run, "position": linked.position}
        answer["duplicate"] = appended.duplicate and linked.duplicate
    return JSONResponse(
        answer,
        status_code=200 if answer["duplicate"] else 201,
        headers={POSITION_HEADER: str(answer["position"])},
    )


@router.post(
    "/models/{name}/versions/{version}/training-runs",
    status_code=201,
    summary="Name an OpenLineage run that trained a registered version",
    responses={200: {"description": "named before, exactly so"}, **answers(NotFound, Conflict)},
)
async def link_training_run(
    name: Name,
    version: Name,
    body: LinkTrainingRun,
    principal: Annotated[Principal, Depends(_admin)],
    commands: Commands,
) -> JSONResponse:
    linked = await commands.link_training_run(principal.tenant, name, version, body.run_id)
    answer = {
        "name": name,
        "version": version,
        "training_run": body.run_id,
        "id": linked.id,
        "position": linked.position,
        "duplicate": linked.duplicate,
    }
    return JSONResponse(
        answer,
        status_code=200 if linked.duplicate else 201,
        headers={POSITION_HEADER: str(linked.position)},
    )


@router.put(
    "/models/{name}/aliases/{alias}",
    summary="Point an alias at a registered version",
    responses=answers(NotFound),
)
async def set_alias(
    name: Name,
    alias: Name,
    body: SetAlias,
    principal: Annotated[Principal, Depends(_admin)],
    commands: Commands,
    response: Response,
) -> dict[str, Any]:
    appended = await commands.set_alias(principal.tenant, name, alias, body.version)
    response.headers[POSITION_HEADER] = str(appended.position)
    return {"name": name, "alias": alias, "version": body.version, "position": appended.position}


@router.delete(
    "/models/{name}/aliases/{alias}", summary="Remove an alias", responses=answers(NotFound)
)
async def remove_alias(
    name: Name,
    alias: Name,
    principal: Annotated[Principal, Depends(_admin)],
    commands: Commands,
    response: Response,
) -> dict[str, Any]:
    appended = await commands.remove_alias(principal.tenant, name, alias)
    response.headers[POSITION_HEADER] = str(appended.position)
    return {"name": name, "alias": alias, "version": None, "position": appended.position}


@router.get("/models", summary="Registered models with their versions and aliases")
async def list_models(
    principal: Annotated[Principal, Depends(_read)],
    engine: Annotated[Connector, Depends(_registry)],
) -> dict[str, Any]:
    async with engine.connect() as conn:
        found = await RegistryReader(conn).read_models(principal.tenant)
    return {"models": [_model(m) for m in found]}


@router.get(
    "/models/{name}",
    summary="One model: versions, signatures, tags, aliases",
    responses=answers(NotFound),
)
async def read_model(
    name: Name,
    principal: Annotated[Principal, Depends(_read)],
    engine: Annotated[Connector, Depends(_registry)],
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
                "training_runs": list(v.training_runs),
            }
            for v in model.versions
        ],
    }
