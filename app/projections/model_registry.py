"""The model registry read model: registered versions with signatures and tags, and
aliases, per tenant (``causeway.model.registered`` and ``causeway.model.aliased``)."""

from __future__ import annotations

from sqlalchemy import delete
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import model_aliases, model_versions
from app.store.model_registry import ALIASED, REGISTERED
from app.store.records import StoredEvent


class ModelRegistry:
    name = "model-registry"
    tables = (model_versions, model_aliases)
    types = frozenset({REGISTERED, ALIASED})

    async def apply(self, conn: AsyncConnection, event: StoredEvent) -> None:
        record = event.record
        data = record.data
        if record.type == REGISTERED:
            await conn.execute(
                insert(model_versions).values(
                    tenant=record.tenant,
                    name=data["name"],
                    version=data["version"],
                    signature=data["signature"],
                    signature_digest=record.model_signature,
                    tags=data.get("tags") or {},
                    enforce_outputs=bool(data.get("enforce_outputs")),
                    registered_at=record.recorded_at,
                    position=record.position,
                )
            )
        elif data.get("version") is None:
            await conn.execute(
                delete(model_aliases).where(
                    model_aliases.c.tenant == record.tenant,
                    model_aliases.c.name == data["name"],
                    model_aliases.c.alias == data["alias"],
                )
            )
        else:
            statement = insert(model_aliases).values(
                tenant=record.tenant,
                name=data["name"],
                alias=data["alias"],
                version=data["version"],
                position=record.position,
            )
            await conn.execute(
                statement.on_conflict_do_update(
                    index_elements=["tenant", "name", "alias"],
                    set_={"version": statement.excluded.version, "position": record.position},
                )
            )
