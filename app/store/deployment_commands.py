"""Deployment commands: start a rollout, shift traffic, promote, roll back. Each reads
the service's state from its stream in the log (never a read model, which may lag),
checks the transition (``deployments``), and appends one ``causeway.deployment.*`` event
expecting that stream version, so two commands racing on one service cannot both win
(the loser gets 409).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.db.engine import Engine
from app.errors import BadRequest, Conflict, NotFound
from app.store import deployments
from app.store.append.group_commit import Appender
from app.store.deployment_reads import DeploymentReader
from app.store.deployments import DeploymentState, incompatibility
from app.store.model_registry import is_valid_name
from app.store.records import NewEvent


@dataclass(frozen=True, slots=True)
class Applied:
    """The service's state after the command's event, and where that event landed."""

    state: DeploymentState
    position: int


@dataclass(frozen=True, slots=True)
class Rollout:
    model: str
    version: str
    percent: int
    strategy: str
    reason: str | None
    force: bool  # roll out a version whose signature cannot replace the stable one's


class DeploymentCommands:
    def __init__(self, engine: Engine, appender: Appender) -> None:
        self._engine = engine
        self._appender = appender

    async def fetch_state(self, tenant: str, service: str) -> DeploymentState:
        """The service's state folded from its stream (a valid name, or a 400)."""
        if not is_valid_name(service):
            raise BadRequest(
                f"{service!r} is not a valid service name: 1-128 of letters, digits, '_', '.', '-'"
            )
        async with self._engine.connect() as conn:
            return await DeploymentReader(conn).fetch_state(tenant, service)

    async def start_rollout(
        self, tenant: str, service: str, rollout: Rollout, *, actor: str
    ) -> Applied:
        state = await self.fetch_state(tenant, service)
        # The service's own rules first (the model it serves, a rollout under way): a
        # version of another model is refused for that, not for a signature nobody
        # compares it with.
        event = deployments.start_rollout(
            state,
            model=rollout.model,
            version=rollout.version,
            percent=rollout.percent,
            strategy=rollout.strategy,
            reason=rollout.reason,
            actor=actor,
            force=rollout.force,
        )
        await self._check_signatures(tenant, state, rollout)
        return await self._apply(tenant, state, event)

    # ``version`` (each optional): the version the command is meant for; another is a 409.

    async def shift_traffic(
        self,
        tenant: str,
        service: str,
        *,
        percent: int,
        reason: str | None,
        actor: str,
        version: str | None = None,
    ) -> Applied:
        state = await self.fetch_state(tenant, service)
        event = deployments.shift_traffic(
            state, percent=percent, reason=reason, actor=actor, version=version
        )
        return await self._apply(tenant, state, event)

    async def promote(
        self,
        tenant: str,
        service: str,
        *,
        reason: str | None,
        actor: str,
        version: str | None = None,
    ) -> Applied:
        state = await self.fetch_state(tenant, service)
        event = deployments.promote(state, reason=reason, actor=actor, version=version)
        return await self._apply(tenant, state, event)

    async def rollback(
        self, tenant: str, service: str, *, reason: str, actor: str, version: str | None = None
    ) -> Applied:
        state = await self.fetch_state(tenant, service)
        event = deployments.rollback(state, reason=reason, actor=actor, version=version)
        return await self._apply(tenant, state, event)

    async def _check_signatures(
        self, tenant: str, state: DeploymentState, rollout: Rollout
    ) -> None:
        """The candidate must be registered (else a 404), and its signature must be able to
        replace the stable version's, unless ``force`` (else a 409: it conflicts with what
        is stored)."""
        async with self._engine.connect() as conn:
            reader = DeploymentReader(conn)
            candidate = await reader.fetch_signature(tenant, rollout.model, rollout.version)
            if candidate is None:
                raise NotFound(
                    f"model {rollout.model!r} version {rollout.version!r} is not registered",
                    model=rollout.model,
                    version=rollout.version,
                )
            if state.stable_version is None or state.model is None:
                return
            current = await reader.fetch_signature(tenant, state.model, state.stable_version)
        why = incompatibility(current or {}, candidate)
        if why is not None and not rollout.force:
            raise Conflict(
                f"version {rollout.version!r} cannot replace {state.stable_version!r}: {why}; "
                "send force: true to roll out anyway",
                reason=why,
            )

    async def _apply(self, tenant: str, state: DeploymentState, event: NewEvent) -> Applied:
        [appended] = await self._appender.append(tenant, [event])
        return Applied(deployments.fold(state, event.type, event.data), appended.position)
