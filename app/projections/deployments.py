"""The deployments read model: per service, the state now and after each event (so
history and "which version served at time T" are plain lookups)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import deployment_history, deployments
from app.store.deployments import PREFIX, TYPES, DeploymentState, fold
from app.store.records import StoredEvent


class Deployments:
    name = "deployments"
    tables = (deployments, deployment_history)
    types = TYPES

    async def apply(self, conn: AsyncConnection, event: StoredEvent) -> None:
        record = event.record
        data = record.data
        service = data["service"]
        d = deployments.c
        row = (
            await conn.execute(
                select(deployments).where(d.tenant == record.tenant, d.service == service)
            )
        ).one_or_none()
        state = DeploymentState(service)
        if row is not None:
            state = DeploymentState(
                service=service,
                model=row.model,
                stable_version=row.stable_version,
                candidate_version=row.candidate_version,
                candidate_percent=row.candidate_percent,
                previous_stable=tuple(row.previous_stable),
            )
        after = fold(state, record.type, data)
        values = {
            "model": after.model,
            "stable_version": after.stable_version,
            "candidate_version": after.candidate_version,
            "candidate_percent": after.candidate_percent,
            "previous_stable": list(after.previous_stable),
            "status": after.status,
            "updated_at": record.recorded_at,
            "position": record.position,
        }
        await conn.execute(
            insert(deployments)
            .values(tenant=record.tenant, service=service, **values)
            .on_conflict_do_update(index_elements=["tenant", "service"], set_=values)
        )
        await conn.execute(
            insert(deployment_history).values(
                tenant=record.tenant,
                service=service,
                position=record.position,
                at=record.recorded_at,
                action=record.type.removeprefix(PREFIX),
                model=after.model,
                stable_version=after.stable_version,
                candidate_version=after.candidate_version,
                candidate_percent=after.candidate_percent,
                reason=data.get("reason"),
                actor=data.get("actor"),
                event_id=record.id,
            )
        )
