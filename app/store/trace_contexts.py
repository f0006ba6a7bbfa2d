"""The trace contexts stored with events: the CloudEvents Distributed Tracing extension
(``traceparent``, ``tracestate``) kept in ``events.extensions``. Read only when tracing is
on, to link an event's span to its causes' traces."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import events
from app.telemetry.tracing import TraceContext


async def trace_contexts(
    connection: AsyncConnection, tenant: str, ids: Collection[str]
) -> dict[str, TraceContext]:
    """The stored ``(traceparent, tracestate)`` of each event of ``tenant`` in ``ids`` that
    has a ``traceparent``."""
    if not ids:
        return {}
    traceparent = events.c.extensions["traceparent"].astext
    tracestate = events.c.extensions["tracestate"].astext
    statement = select(events.c.id, traceparent, tracestate).where(
        events.c.tenant == tenant, events.c.id.in_(list(ids)), traceparent.is_not(None)
    )
    rows = (await connection.execute(statement)).all()
    return {row[0]: (row[1], row[2]) for row in rows}
