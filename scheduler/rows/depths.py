"""The depth of each queue of a tenant, from the ``tasks`` table: ready tasks by priority,
delayed, in flight, dead letters and their alerts, the oldest ready task's age (the
gauges of ``GET /metrics`` and ``GET /queues``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import routes, tasks
from scheduler.tasks import NEEDS_ATTENTION

_c = tasks.c


@dataclass(frozen=True, slots=True)
class QueueDepth:
    queue: str
    ready_by_priority: dict[int, int]
    delayed: int
    in_flight: int
    dead_letters: int
    alerts: int
    oldest_ready_s: float

    @property
    def ready(self) -> int:
        return sum(self.ready_by_priority.values())


async def read_depths(conn: AsyncConnection, tenant: str, *, now: datetime) -> list[QueueDepth]:
    ready = and_(_c.state == "ready", _c.available_at <= now)
    rows = await conn.execute(
        select(
            _c.queue,
            _c.priority,
            func.count().filter(ready).label("ready"),
            func.count().filter(_c.state == "ready", _c.available_at > now).label("delayed"),
            func.count().filter(_c.state == "leased").label("in_flight"),
            func.count().filter(_c.state == "dead").label("dead"),
            func.count()
            .filter(_c.state == "dead", _c.disposition.in_(NEEDS_ATTENTION))
            .label("alerts"),
            func.min(_c.available_at).filter(ready).label("oldest"),
        )
        .where(_c.tenant == tenant, _c.state.in_(("ready", "leased", "dead")))
        .group_by(_c.queue, _c.priority)
    )
    # Queues of the routes, too, so an idle queue reads as zeros rather than vanishing.
    routed = await conn.execute(
        select(routes.c.spec["queue"].astext)
        .where(routes.c.tenant == tenant, routes.c.spec["queue"].astext.is_not(None))
        .distinct()
    )
    found = {q: QueueDepth(q, {}, 0, 0, 0, 0, 0.0) for (q,) in routed}
    for row in rows:
        depth = found.get(row.queue) or QueueDepth(row.queue, {}, 0, 0, 0, 0, 0.0)
        by_priority = dict(depth.ready_by_priority)
        if row.ready:
            by_priority[int(row.priority)] = int(row.ready)
        age = (now - row.oldest).total_seconds() if row.oldest is not None else 0.0
        found[row.queue] = QueueDepth(
            row.queue,
            by_priority,
            depth.delayed + int(row.delayed),
            depth.in_flight + int(row.in_flight),
            depth.dead_letters + int(row.dead),
            depth.alerts + int(row.alerts),
            round(max(depth.oldest_ready_s, age, 0.0), 3),
        )
    return [found[q] for q in sorted(found)]
