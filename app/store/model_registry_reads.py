"""Reads of the model registry read model (written by ``app.projections.model_registry``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import and_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import events, model_aliases, model_versions
from app.store.model_registry import ALIASED, REGISTERED, TRAINED, registration_id
from app.store.records import Appended


@dataclass(frozen=True, slots=True)
class ModelVersion:
    name: str
    version: str
    signature: dict[str, Any]
    signature_digest: str
    tags: dict[str, Any]
    enforce_outputs: bool
    registered_at: datetime
    position: int
    # The OpenLineage runs that trained it, in the order they were named (from the log)
    training_runs: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class Model:
    name: str
    versions: list[ModelVersion]
    aliases: dict[str, str]


@dataclass(frozen=True, slots=True)
class Alias:
    """An alias's last move: the version it points at (None: removed), and its event."""

    version: str | None
    event: Appended


class RegistryReader:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def read_models(self, tenant: str, name: str | None = None) -> list[Model]:
        v, a = model_versions.c, model_aliases.c
        versions = select(model_versions).where(v.tenant == tenant)
        aliases = select(model_aliases).where(a.tenant == tenant)
        if name is not None:
            versions, aliases = versions.where(v.name == name), aliases.where(a.name == name)
        # The aliases first: each statement reads the read model as it is then, and the
        # registry follows the log, where a version is registered before an alias names
        # it, so every alias read names a version the later read finds. (Versions first,
        # an alias moved to a version registered in between named one the answer lacked.)
        moved = list(await self._conn.execute(aliases.order_by(a.name, a.alias)))
        found: dict[str, Model] = {}
        trained = await self.read_training_runs(tenant, name)
        for row in await self._conn.execute(versions.order_by(v.name, v.position)):
            model = found.setdefault(row.name, Model(row.name, [], {}))
            model.versions.append(_version(row, trained.get((row.name, row.version), ())))
        for row in moved:
            if row.name in found:
                found[row.name].aliases[row.alias] = row.version
        return list(found.values())

    async def read_versions(
        self, tenant: str, keys: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], ModelVersion]:
        wanted = list(keys)
        if not wanted:
            return {}
        v = model_versions.c
        rows = await self._conn.execute(
            select(model_versions).where(
                and_(v.tenant == tenant, tuple_(v.name, v.version).in_(wanted))
            )
        )
        trained = await self.read_training_runs(tenant)
        return {
            (row.name, row.version): _version(row, trained.get((row.name, row.version), ()))
            for row in rows
        }

    async def read_training_runs(
        self, tenant: str, name: str | None = None
    ) -> dict[tuple[str, str], tuple[str, ...]]:
        """The runIds that trained each version (of model ``name``), read from the log."""
        e = events.c
        statement = select(e.model_name, e.model_version, e.data["training_run"].astext).where(
            e.tenant == tenant, e.type == TRAINED
        )
        if name is not None:
            statement = statement.where(e.stream == f"causeway:model:{name}")
        found: dict[tuple[str, str], tuple[str, ...]] = {}
        for model, version, run in await self._conn.execute(statement.order_by(e.position)):
            found[(model, version)] = (*found.get((model, version), ()), run)
        return found


def _version(row: Any, training_runs: tuple[str, ...] = ()) -> ModelVersion:
    return ModelVersion(
        name=row.name,
        version=row.version,
        signature=row.signature,
        signature_digest=row.signature_digest,
        tags=row.tags,
        enforce_outputs=row.enforce_outputs,
        registered_at=row.registered_at,
        position=row.position,
        training_runs=training_runs,
    )


async def fetch_registered_digest(
    conn: AsyncConnection, tenant: str, name: str, version: str
) -> str | None:
    """The digest of a registered version, read from the log itself (never stale)."""
    e = events.c
    found = await conn.execute(
        select(e.model_signature).where(
            e.tenant == tenant, e.id == registration_id(name, version), e.type == REGISTERED
        )
    )
    return found.scalar()


async def fetch_alias(conn: AsyncConnection, tenant: str, name: str, alias: str) -> Alias | None:
    """The last move of ``alias`` of model ``name``, read from the log itself (never
    stale); None when it was never set."""
    e = events.c
    found = await conn.execute(
        select(e.data["version"].astext, e.id, e.source, e.stream, e.stream_version, e.position)
        .where(
            e.tenant == tenant,
            e.stream == f"causeway:model:{name}",
            e.type == ALIASED,
            e.data["alias"].astext == alias,
        )
        .order_by(e.position.desc())
        .limit(1)
    )
    row = found.first()
    if row is None:
        return None
    version, id, source, stream, stream_version, position = row
    return Alias(version, Appended(id, source, stream, stream_version, position, duplicate=True))
