"""``GET /projections``: each read model's checkpoint, lag and last error."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.deps import engine_of, require
from app.projections.runner import ProjectionRunner, fetch_status
from app.store.keys import Principal, Scope

router = APIRouter(tags=["projections"])


@router.get("/projections", summary="Checkpoint, head, lag and last error of each projection")
async def projections(
    request: Request,
    _: Annotated[Principal, Depends(require(Scope.READ))],
    engine: Annotated[AsyncEngine, Depends(engine_of)],
) -> dict[str, Any]:
    async with engine.connect() as conn:
        runner: ProjectionRunner = request.app.state.runner
        found = await fetch_status(conn, runner.projections)
    return {"projections": [dataclasses.asdict(s) for s in found]}
