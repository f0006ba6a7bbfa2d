"""``GET /projections``: each read model's checkpoint, lag and last error."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from sqlalchemy import BigInteger, any_, literal, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db.tables import events
from app.projections.runner import ProjectionRunner, ProjectionStatus, fetch_status
from app.store.keys import Principal, Scope
from app.web.dependencies import engine_of, require

router = APIRouter(tags=["projections"])

# Projections read every tenant's events, so the text of an error (a key, a subject, a
# value) may be another tenant's. It is shown to the tenant whose event failed; others see
# where and how often, and an operator reads the text with ``causeway projections status``.
WITHHELD = "withheld: the failing event belongs to another tenant"


@router.get("/projections", summary="Checkpoint, head, lag and last error of each projection")
async def projections(
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.READ))],
    engine: Annotated[AsyncEngine, Depends(engine_of)],
) -> dict[str, Any]:
    async with engine.connect() as conn:
        runner: ProjectionRunner = request.app.state.runner
        found = await fetch_status(conn, runner.projections)
        shown = await _errors_shown_to(conn, principal.tenant, found)
    return {"projections": [dataclasses.asdict(s) for s in shown]}


async def _errors_shown_to(
    conn: AsyncConnection, tenant: str, found: list[ProjectionStatus]
) -> list[ProjectionStatus]:
    failed = sorted({s.error_position for s in found if s.last_error and s.error_position})
    if not failed:
        return found
    own = set(
        (
            await conn.execute(
                select(events.c.position).where(
                    events.c.position == any_(literal(failed, ARRAY(BigInteger))),
                    events.c.tenant == tenant,
                )
            )
        ).scalars()
    )
    return [
        s
        if s.last_error is None or s.error_position in own
        else dataclasses.replace(s, last_error=WITHHELD)
        for s in found
    ]
