"""``GET /projections``: each read model's checkpoint, lag and last error."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from app.db.engine import Engine
from app.projections.runner import ProjectionRunner
from app.projections.status import fetch_status, withhold_others_errors
from app.store.keys import Principal, Scope
from app.web.dependencies import engine_of, require

router = APIRouter(tags=["projections"])


@router.get("/projections", summary="Checkpoint, head, lag and last error of each projection")
async def projections(
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.READ))],
    engine: Annotated[Engine, Depends(engine_of)],
) -> dict[str, Any]:
    runner: ProjectionRunner = request.app.state.runner
    async with engine.connect() as conn:
        found = await fetch_status(conn, runner.projections)
        shown = await withhold_others_errors(conn, principal.tenant, found)
    return {"projections": [dataclasses.asdict(s) for s in shown]}
