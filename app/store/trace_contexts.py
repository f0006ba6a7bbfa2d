"""The trace contexts stored with events: the CloudEvents Distributed Tracing extension
(``traceparent``, ``tracestate``) kept in ``events.extensions``. Read to link an event's
span to its causes' traces (only while tracing is on), and by every completion of a
scheduler task (its results continue the trigger's trace, tracing on or off)."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import any_, bindparam, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.types import Text

from app.db.engine import DriverStatement
from app.db.tables import events
from app.telemetry.tracing import TraceContext

# The columns of a trace context, for reads that join them (the scheduler's completions).
TRACEPARENT = events.c.extensions["traceparent"].astext
TRACESTATE = events.c.extensions["tracestate"].astext
# On the driver: a batch completion runs it, and through SQLAlchemy it cost as much server
# CPU as the rest of the completion's reads together. Found through the unique (tenant,
# id) index, as a generic plan does too.
_FETCH = DriverStatement.of(
    select(events.c.id, TRACEPARENT, TRACESTATE).where(
        events.c.tenant == bindparam("tenant"),
        events.c.id == any_(bindparam("ids", type_=ARRAY(Text))),
        TRACEPARENT.is_not(None),
    )
)


async def trace_contexts(
    connection: AsyncConnection, tenant: str, ids: Collection[str]
) -> dict[str, TraceContext]:
    """The stored ``(traceparent, tracestate)`` of each event of ``tenant`` in ``ids`` that
    has a ``traceparent``."""
    if not ids:
        return {}
    rows = await _FETCH.rows(connection, tenant=tenant, ids=list(ids))
    return {row[0]: (row[1], row[2]) for row in rows}
