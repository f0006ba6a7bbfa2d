"""Reads for deployments: the state a command checks (folded from the log, so it is never
stale), and the read model's views (now, as of a time, history)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import deployment_history, deployments, events
from app.store.deployments import TYPES, DeploymentState, fold, stream_of
from app.store.model_registry import REGISTERED, registration_id
from app.store.records import MAX_POSITION


@dataclass(frozen=True, slots=True)
class Change:
    """One deployment event, and the service's state right after it."""

    position: int
    at: datetime
    action: str
    model: str | None
    stable_version: str | None
    candidate_version: str | None
    candidate_percent: int
    reason: str | None
    actor: str | None
    event_id: str


@dataclass(frozen=True, slots=True)
class DeploymentView:
    service: str
    model: str | None
    stable_version: str | None
    candidate_version: str | None
    candidate_percent: int
    status: str
    updated_at: datetime
    position: int


@dataclass(frozen=True, slots=True)
class LoggedChange:
    position: int
    type: str
    data: dict[str, Any]
    recorded_at: datetime


@dataclass(frozen=True, slots=True)
class LoggedCommand:
    """A deployment command's event as stored: its type and data, where it landed."""

    type: str
    data: dict[str, Any]
    stream_version: int
    position: int


class DeploymentReader:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def fetch_state(
        self, tenant: str, service: str, *, through: int | None = None
    ) -> DeploymentState:
        """The service's state folded from its stream, with the stream's version; with
        ``through``, as it was after that stream version."""
        e = events.c
        statement = select(e.type, e.data).where(e.tenant == tenant, e.stream == stream_of(service))
        if through is not None:
            statement = statement.where(e.stream_version <= through)
        rows = await self._conn.execute(statement.order_by(e.stream_version))
        state = DeploymentState(service)
        for row in rows:
            state = fold(state, row.type, row.data)
        return state

    async def fetch_version(self, tenant: str, service: str) -> int:
        """The service's stream version (0: no deployment yet): one index lookup, not a
        fold of its history (a canary ramped by automation has thousands of events)."""
        e = events.c
        version = await self._conn.scalar(
            select(func.max(e.stream_version)).where(
                e.tenant == tenant, e.stream == stream_of(service)
            )
        )
        return int(version or 0)

    async def fetch_command(self, tenant: str, event_id: str) -> LoggedCommand | None:
        """The deployment command stored under ``event_id`` (``deployments.request_id``),
        if any."""
        e = events.c
        row = (
            await self._conn.execute(
                select(e.type, e.data, e.stream_version, e.position).where(
                    e.tenant == tenant, e.id == event_id, e.type.in_(sorted(TYPES))
                )
            )
        ).one_or_none()
        if row is None:
            return None
        return LoggedCommand(row.type, dict(row.data), row.stream_version, row.position)

    async def fetch_signature(self, tenant: str, model: str, version: str) -> dict[str, Any] | None:
        e = events.c
        data = await self._conn.execute(
            select(e.data).where(
                e.tenant == tenant, e.id == registration_id(model, version), e.type == REGISTERED
            )
        )
        found = data.scalar()
        return None if found is None else dict(found["signature"])

    async def read_changes_after(self, tenant: str, service: str, after: int) -> list[LoggedChange]:
        e = events.c
        rows = await self._conn.execute(
            select(e.position, e.type, e.data, e.recorded_at)
            .where(
                e.tenant == tenant,
                e.stream == stream_of(service),
                e.position > after,
                e.type.in_(sorted(TYPES)),
            )
            .order_by(e.position)
        )
        return [LoggedChange(r.position, r.type, r.data, r.recorded_at) for r in rows]

    async def read_deployments(self, tenant: str) -> list[DeploymentView]:
        d = deployments.c
        rows = await self._conn.execute(
            select(deployments).where(d.tenant == tenant).order_by(d.service)
        )
        return [_view(row) for row in rows]

    async def read_deployment(self, tenant: str, service: str) -> DeploymentView | None:
        d = deployments.c
        row = (
            await self._conn.execute(
                select(deployments).where(d.tenant == tenant, d.service == service)
            )
        ).one_or_none()
        return None if row is None else _view(row)

    async def read_history(
        self, tenant: str, service: str, *, at: datetime | None = None, through: int = MAX_POSITION
    ) -> list[Change]:
        """The service's changes in order; with ``at``, only those at or before it. Pass
        the position of a view read before (``through``) to read the history it folds:
        the projection may commit between two statements."""
        h = deployment_history.c
        statement = select(deployment_history).where(
            h.tenant == tenant, h.service == service, h.position <= through
        )
        if at is not None:
            statement = statement.where(h.at <= at)
        rows = await self._conn.execute(statement.order_by(h.position))
        return [_change(r) for r in rows]

    async def read_histories(
        self, tenant: str, views: list[DeploymentView]
    ) -> dict[str, list[Change]]:
        """The history of each service of ``views`` (all the tenant's, as
        ``read_deployments`` gives them), in one statement: each up to its view's position
        (what the view folds, as ``read_history``'s ``through``)."""
        h = deployment_history.c
        rows = await self._conn.execute(
            select(deployment_history).where(h.tenant == tenant).order_by(h.service, h.position)
        )
        through = {v.service: v.position for v in views}
        histories: dict[str, list[Change]] = {v.service: [] for v in views}
        for r in rows:
            if r.position <= through.get(r.service, -1):
                histories[r.service].append(_change(r))
        return histories


def _change(r: Any) -> Change:
    return Change(
        position=r.position,
        at=r.at,
        action=r.action,
        model=r.model,
        stable_version=r.stable_version,
        candidate_version=r.candidate_version,
        candidate_percent=r.candidate_percent,
        reason=r.reason,
        actor=r.actor,
        event_id=r.event_id,
    )


def _view(row: Any) -> DeploymentView:
    return DeploymentView(
        service=row.service,
        model=row.model,
        stable_version=row.stable_version,
        candidate_version=row.candidate_version,
        candidate_percent=row.candidate_percent,
        status=row.status,
        updated_at=row.updated_at,
        position=row.position,
    )
