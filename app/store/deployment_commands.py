"""Deployment commands: start a rollout, shift traffic, promote, roll back. Each reads
the service's state from its stream in the log (never a read model, which may lag),
checks the transition (``deployments``), and appends one ``causeway.deployment.*`` event
expecting that stream version, so two commands racing on one service cannot both win
(the loser gets 409).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

from app.db.engine import Engine
from app.errors import AppError, BadRequest, Conflict, IdempotencyKeyReused, NotFound
from app.store import deployments
from app.store.append.group_commit import Appender
from app.store.deployment_reads import DeploymentReader
from app.store.deployments import Asked, DeploymentState, incompatibility, request_id
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
    """Each command takes the sender's idempotency key (``key``, optional): a command sent
    again with it, its answer lost, is answered as the first was and stores nothing; sent
    with it but asking something else, it is refused (``IdempotencyKeyReused``)."""

    def __init__(self, engine: Engine, appender: Appender) -> None:
        self._engine = engine
        self._appender = appender

    async def fetch_state(self, tenant: str, service: str) -> DeploymentState:
        """The service's state folded from its stream (a valid name, or a 400)."""
        _check_name(service)
        async with self._engine.connect() as conn:
            return await DeploymentReader(conn).fetch_state(tenant, service)

    async def start_rollout(
        self, tenant: str, service: str, rollout: Rollout, *, actor: str, key: str | None = None
    ) -> Applied:
        asked = Asked("rollout", service, asdict(rollout), actor, key)

        async def decide(state: DeploymentState) -> NewEvent:
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
            return event

        return await self._run(tenant, service, asked, decide)

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
        key: str | None = None,
    ) -> Applied:
        parameters = {"percent": percent, "reason": reason, "version": version}
        asked = Asked("traffic", service, parameters, actor, key)

        async def decide(state: DeploymentState) -> NewEvent:
            return deployments.shift_traffic(
                state, percent=percent, reason=reason, actor=actor, version=version
            )

        return await self._run(tenant, service, asked, decide)

    async def promote(
        self,
        tenant: str,
        service: str,
        *,
        reason: str | None,
        actor: str,
        version: str | None = None,
        key: str | None = None,
    ) -> Applied:
        return await self._acting_on(
            tenant, service, "promote", deployments.promote, reason, actor, version, key
        )

    async def rollback(
        self,
        tenant: str,
        service: str,
        *,
        reason: str,
        actor: str,
        version: str | None = None,
        key: str | None = None,
    ) -> Applied:
        return await self._acting_on(
            tenant, service, "rollback", deployments.rollback, reason, actor, version, key
        )

    async def _acting_on(
        self,
        tenant: str,
        service: str,
        command: str,
        decision: Callable[..., NewEvent],
        reason: str | None,
        actor: str,
        version: str | None,
        key: str | None,
    ) -> Applied:
        """``command``, which acts on the candidate (or for a rollback, with none, on the
        stable version): ``decision`` of ``deployments``."""
        asked = Asked(command, service, {"reason": reason, "version": version}, actor, key)

        async def decide(state: DeploymentState) -> NewEvent:
            return decision(state, reason=reason, actor=actor, version=version)

        return await self._run(tenant, service, asked, decide)

    async def _run(
        self,
        tenant: str,
        service: str,
        asked: Asked,
        decide: Callable[[DeploymentState], Awaitable[NewEvent]],
    ) -> Applied:
        """Decide on the service's state now and append the event, unless a command with
        ``asked``'s key was stored before: then its answer."""
        _check_name(service)
        if (earlier := await self._answered(tenant, asked)) is not None:
            return earlier
        try:
            state = await self.fetch_state(tenant, service)
            event = asked.keyed(await decide(state))
            [appended] = await self._appender.append(tenant, [event])
        except AppError:
            # The same command sent twice at once: the one whose event landed first answers
            # both. The other lost the append, or decided on the state the first left and
            # was refused (a promotion with nothing left to promote).
            if (earlier := await self._answered(tenant, asked)) is not None:
                return earlier
            raise
        if appended.duplicate:  # stored meanwhile, as this one: read what it answered
            return await self._answered(tenant, asked) or Applied(state, appended.position)
        return Applied(deployments.fold(state, event.type, event.data), appended.position)

    async def _answered(self, tenant: str, asked: Asked) -> Applied | None:
        """The answer the command stored under ``asked``'s key got: the service's state
        right after it, and where it landed; None when none is stored (or no key)."""
        if asked.key is None:
            return None
        async with self._engine.connect() as conn:
            reader = DeploymentReader(conn)
            found = await reader.fetch_command(tenant, request_id(asked.key))
            if found is None:
                return None
            if not asked.is_asked_by(found.data):
                raise IdempotencyKeyReused(
                    f"Idempotency-Key {asked.key!r} was sent before with another command "
                    f"({found.type} on {found.data.get('service')!r}, its event at position "
                    f"{found.position}); send a new key for a new command",
                    position=found.position,
                )
            state = await reader.fetch_state(tenant, asked.service, through=found.stream_version)
        return Applied(state, found.position)

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


def _check_name(service: str) -> None:
    if not is_valid_name(service):
        raise BadRequest(
            f"{service!r} is not a valid service name: 1-128 of letters, digits, '_', '.', '-'"
        )
