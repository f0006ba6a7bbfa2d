"""The model registry's commands: register a version, point or remove an alias. Each
reads what it must check from the log, checks it, and appends one ``causeway.model.*``
event through the writer, so the registry read model is rebuilt from the log and a
version can be used the moment its registration answers.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from app.db.engine import Engine
from app.errors import BadRequest, Conflict, IdConflict, NotFound
from app.store.append.group_commit import Appender
from app.store.model_registry import (
    Signature,
    alias_event,
    is_valid_name,
    registration_event,
    training_event,
    training_id,
)
from app.store.model_registry_reads import fetch_alias, fetch_registered_digest
from app.store.openlineage import fetch_heads, fetch_stored, run_key, run_stream
from app.store.records import Appended


@dataclass(frozen=True, slots=True)
class Registered:
    signature_digest: str
    appended: Appended  # ``duplicate``: registered before, exactly so


class ModelCommands:
    def __init__(self, engine: Engine, appender: Appender) -> None:
        self._engine = engine
        self._appender = appender

    async def register(
        self,
        tenant: str,
        name: str,
        version: str,
        signature: Signature,
        tags: Mapping[str, str],
        *,
        enforce_outputs: bool,
    ) -> Registered:
        """Register ``name`` ``version``. A registration does not change: the same one
        again is a duplicate, another signature, tags or ``enforce_outputs`` a 409."""
        _check_names(name, version)
        digest = signature.digest()
        stored = await self._registered_digest(tenant, name, version)
        if stored is not None and stored != digest:
            raise _registered_otherwise(name, version, stored, digest)
        event = registration_event(
            name, version, signature, dict(tags), enforce_outputs=enforce_outputs
        )
        try:
            [appended] = await self._appender.append(tenant, [event])
        except IdConflict:
            # Registered before with the same signature and other tags or enforce_outputs,
            # or meanwhile (a concurrent registration): the log refuses it in its own terms.
            stored = await self._registered_digest(tenant, name, version)
            raise _registered_otherwise(name, version, stored or digest, digest) from None
        return Registered(digest, appended)

    async def link_training_run(
        self, tenant: str, name: str, version: str, run_id: str
    ) -> Appended:
        """Record that the OpenLineage run ``run_id`` trained ``name`` ``version``: a
        ``causeway.model.trained`` event caused by the run's last stored event (none when
        the log has no event of the run yet). The same link again is a duplicate."""
        _check_names(name, version)
        if not _is_uuid(run_id):
            raise BadRequest(f"training_run {run_id!r} is not a UUID (an OpenLineage runId)")
        run_id = run_key(run_id)
        if await self._registered_digest(tenant, name, version) is None:
            raise NotFound(f"model {name!r} has no registered version {version!r}")
        async with self._engine.connect() as conn:
            stored = await fetch_stored(conn, tenant, training_id(name, version, run_id))
            if stored is not None:
                return stored
            heads = await fetch_heads(conn, tenant, [run_stream(run_id)])
        causes = tuple(h.id for h in heads.values())
        try:
            [appended] = await self._appender.append(
                tenant, [training_event(name, version, run_id, causes)]
            )
        except IdConflict:  # linked meanwhile, after another event of the run
            async with self._engine.connect() as conn:
                stored = await fetch_stored(conn, tenant, training_id(name, version, run_id))
            if stored is None:
                raise
            return stored
        return appended

    async def set_alias(self, tenant: str, name: str, alias: str, version: str) -> Appended:
        """Point ``alias`` at a registered version of ``name``. Where it points already,
        nothing is appended: the answer is the move that pointed it there."""
        _check_names(name, alias)
        if await self._registered_digest(tenant, name, version) is None:
            raise NotFound(f"model {name!r} has no registered version {version!r}")
        async with self._engine.connect() as conn:
            last = await fetch_alias(conn, tenant, name, alias)
        if last is not None and last.version == version:
            return last.event
        after = 0 if last is None else last.event.position
        [appended] = await self._appender.append(tenant, [alias_event(name, alias, version, after)])
        return appended

    async def remove_alias(self, tenant: str, name: str, alias: str) -> Appended:
        """Remove ``alias``; ``NotFound`` when it points nowhere. Removals sent at once
        on the same state are one removal, which each answers (one that reads the alias
        once the first has landed finds it pointing nowhere: ``NotFound``)."""
        _check_names(name, alias)
        async with self._engine.connect() as conn:
            last = await fetch_alias(conn, tenant, name, alias)
        if last is None or last.version is None:
            raise NotFound(f"model {name!r} has no alias {alias!r}")
        [appended] = await self._appender.append(
            tenant, [alias_event(name, alias, None, last.event.position)]
        )
        return appended

    async def _registered_digest(self, tenant: str, name: str, version: str) -> str | None:
        async with self._engine.connect() as conn:
            return await fetch_registered_digest(conn, tenant, name, version)


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _check_names(*names: str) -> None:
    for text in names:
        if not is_valid_name(text):
            raise BadRequest(
                f"{text!r} is not a valid name: 1-128 of letters, digits, '_', '.', '-'"
            )


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
