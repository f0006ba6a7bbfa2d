"""The scheduler over HTTP, as ``app.main`` mounts it: the routers of ``scheduler.web``
in one, in this order (it is the order of ``docs/openapi.json``).

- ``POST/GET/DELETE /routes``: which events become which tasks (``web.routes``).
- ``POST /queues/{queue}/lease``: the best task(s) this worker can run (``max_tasks``), or
  204 after waiting up to ``wait_s``; ``POST /tasks/{id}/heartbeat|complete|fail`` with
  the lease id, ``POST /tasks/complete|fail`` for many at once (``web.leases``).
- ``GET /tasks/{id}``, ``GET /queues``, ``GET /queues/{queue}/autoscale``, ``GET /metrics``
  (Prometheus) (``web.queues``).
- ``GET /dead-letters``, ``GET /dead-letters/{id}``, ``POST /dead-letters/{id}/requeue``,
  ``POST /dead-letters/{id}/discard`` (``web.dead_letters``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import APIRouter

from app.db.engine import Engine
from scheduler.web import PrincipalOf, dead_letters, leases, queues, routes
from scheduler.web.leases import LeasePolicy

if TYPE_CHECKING:
    from app.store.append.group_commit import Appender
    from app.store.records import NewEvent
    from app.web.metrics import Scrape
    from scheduler.autoscale import PidController
    from scheduler.rows.wakeups import TaskWakeups

__all__ = ["LeasePolicy", "Principals", "create_router"]


@dataclass(frozen=True, slots=True)
class Principals:
    admin: PrincipalOf
    worker: PrincipalOf
    read: PrincipalOf
    metrics: PrincipalOf  # read, and a key confirmed lately while the database is away


def create_router(
    engine: Engine,
    appender: Appender,
    decisions: Appender,
    max_request_bytes: int,
    parse_events: Callable[[bytes], list[NewEvent]],
    policy: LeasePolicy,
    controller: PidController,
    more_metrics: Scrape,
    principals: Principals,
    wakeups: TaskWakeups,
) -> APIRouter:
    """``appender`` appends route definitions; ``decisions`` (an appender of its own) the
    decisions of leases, results and dead-letter handling; ``more_metrics`` adds the
    service's own metrics, as a tenant may see them, to ``GET /metrics``."""
    router = APIRouter()
    # Leases first: a request is matched against the routes in order, and workers'
    # leases and completions are the scheduler's hot path.
    router.include_router(
        leases.create_router(
            engine,
            decisions,
            max_request_bytes,
            parse_events,
            policy,
            principals.worker,
            wakeups,
        )
    )
    router.include_router(routes.create_router(engine, appender, principals.admin))
    router.include_router(
        queues.create_router(engine, controller, more_metrics, principals.read, principals.metrics)
    )
    router.include_router(
        dead_letters.create_router(engine, decisions, principals.admin, principals.read)
    )
    return router
