"""docs/observability.md: the drift histogram sees every stored event once, a rebuild of
the drift projection (which reads the whole log again) too: it counted them all again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from secrets import token_hex

from prometheus_client import REGISTRY
from sqlalchemy.ext.asyncio import AsyncEngine

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
