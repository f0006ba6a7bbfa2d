"""docs/observability.md: the drift histogram sees every stored event once, a rebuild of
the drift projection (which reads the whole log again) too: it counted them all again.
And a rebuild that raises an alert (a threshold set since) holds no append back: the
alert was appended in the rebuild's transaction, which then held the log's head until
the whole log was read again."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from secrets import token_hex

import psycopg
from prometheus_client import REGISTRY
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.projections.drift import DriftWatch
from app.projections.runner import ProjectionRunner
from app.store.log import EventLog
from app.store.records import NewEvent


def drift_count(tenant: str, source: str) -> float:
    labels = {"tenant": tenant, "source": source}
    return REGISTRY.get_sample_value("causeway_event_time_drift_seconds_count", labels) or 0.0


async def test_a_rebuild_of_drift_does_not_count_every_event_again(
    engine: AsyncEngine,
) -> None:
    tenant, source = f"t{token_hex(3)}", f"/clock/{token_hex(3)}"
    at = datetime.now(UTC) - timedelta(seconds=0.5)
    async with engine.begin() as conn:
        await EventLog(conn).append(
            tenant,
            [
                NewEvent(
                    id=f"e{i}",
                    source=source,
                    type="test.tick",
                    stream="s",
                    time=at.isoformat(),
                    time_value=at,
                )
                for i in range(10)
            ],
        )
    drift = DriftWatch(alert_s=None)
    runner = ProjectionRunner(engine, [drift])
    await runner.catch_up(drift)
    assert drift_count(tenant, source) == 10  # each stored event once
    # `causeway projections rebuild drift`, done by the leader (serve's process).
    await runner.rebuild(drift)
    assert drift_count(tenant, source) == 10, (
        "the rebuild observed every event of the log into the histogram again"
    )


class PausingDrift(DriftWatch):
    """The drift watch, pausing when it writes the rebuild's state (at its end)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.flushing = asyncio.Event()
        self.go_on = asyncio.Event()

    async def flush(self, conn: AsyncConnection) -> None:
        self.flushing.set()
        await self.go_on.wait()
        await super().flush(conn)


async def test_appends_go_on_while_drift_rebuilds(engine: AsyncEngine) -> None:
    tenant, source = f"t{token_hex(3)}", f"/clock/{token_hex(3)}"
    at = datetime.now(UTC) - timedelta(seconds=30)  # a producer clock 30 s behind
    async with engine.begin() as conn:
        await EventLog(conn).append(
            tenant,
            [
                NewEvent(
                    id=f"e{i}",
                    source=source,
                    type="test.tick",
                    stream="s",
                    time=at.isoformat(),
                    time_value=at,
                )
                for i in range(5)
            ],
        )
    quiet = DriftWatch(alert_s=None)  # no threshold yet: no alert
    await ProjectionRunner(engine, [quiet]).catch_up(quiet)
    # The operator sets CAUSEWAY_DRIFT_ALERT_S=5 and rebuilds drift while serving.
    drift = PausingDrift(alert_s=5.0)
    rebuild = asyncio.create_task(ProjectionRunner(engine, [drift]).rebuild(drift))
    try:
        await asyncio.wait_for(drift.flushing.wait(), 20)
        # Meanwhile an ordinary append of another tenant (with a 2 s lock timeout).
        refused: str | None = None
        try:
            async with engine.begin() as conn:
                await conn.execute(text("SET LOCAL lock_timeout = '2s'"))
                await EventLog(conn).append(
                    "someone-else", [NewEvent(id="x1", source="/s", type="t.x", stream="x")]
                )
        except (DBAPIError, psycopg.Error) as exc:
            refused = str(exc).splitlines()[0]
        assert refused is None, f"an append during the drift rebuild waited on it: {refused}"
    finally:
        drift.go_on.set()
        await rebuild
