"""``GET /projections``: each read model's checkpoint, lag and last error; and, when this
process relays to NATS (``CAUSEWAY_NATS_URL``), the relay's checkpoint and lag."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from app.db.engine import Engine
from app.projections.relay.log import fetch_relay_status
from app.projections.relay.relay import NatsRelay
from app.projections.runner import ProjectionRunner
from app.projections.status import fetch_status, withhold_others_errors
from app.store.keys import Principal, Scope
from app.web.dependencies import engine_of, require

router = APIRouter(tags=["projections"])


@router.get(
    "/projections",
    summary="Checkpoint, head, lag and last error of each projection, and the relay's lag",
)
async def projections(
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.READ))],
    engine: Annotated[Engine, Depends(engine_of)],
) -> dict[str, Any]:
    runner: ProjectionRunner = request.app.state.runner
    relay: NatsRelay | None = request.app.state.relay
    async with engine.connect() as conn:
        found = await fetch_status(conn, runner.projections)
        shown = await withhold_others_errors(conn, principal.tenant, found)
        answer: dict[str, Any] = {"projections": [dataclasses.asdict(s) for s in shown]}
        if relay is not None:
            status = await fetch_relay_status(conn, relay.config.stream, relay.config.tenants)
            # Which tenants it leaves out names other tenants: for `causeway relay status`.
            answer["relay"] = {
                k: v for k, v in dataclasses.asdict(status).items() if k != "tenants"
            }
    return answer
