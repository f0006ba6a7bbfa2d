"""The service's side of ``GET /metrics`` (the route is the scheduler's, beside the queue
gauges): request timing, the pools' figures, and the gauges whose figures live in the
database (each projection's lag, the relay's lag), made per scrape.

The process metrics themselves are ``app.telemetry.metrics``'.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

from prometheus_client.metrics import Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.db.deadlines import NOTHING_LEFT, within
from app.db.engine import DriverPool, Engine
from app.projections.base import Projection
from app.projections.relay.log import RelayStatus, fetch_relay_status
from app.projections.relay.relay import NatsRelay
from app.projections.status import ProjectionStatus, fetch_status
from app.store.failures import is_unavailable
from app.telemetry import metrics
from app.web.route_templates import route_template

# Paths answered before the routing table (app.main ``Causeway.answer``): their own template.
POOL_SAMPLE_S = 5.0
# How long a scrape waits for the gauges kept in the database: a silent database (a frozen
# host) answers nothing, and a scrape past Prometheus' scrape_timeout (10 s by default)
# loses the process's own figures too.
DATABASE_S = 3.0
T = TypeVar("T")
# The service's metrics for a key's tenant (``scrape``), and whether the caller's own read
# of the database answered.
Scrape = Callable[[str, bool], Awaitable[bytes]]


class RequestTimer:
    """Times each HTTP request into ``causeway_http_request_duration_seconds``, labelled by
    the route template the router matched (``scope["route"]``), never the raw path. The
    labelled children are kept, so a request costs two clock reads and a dict lookup."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._children: dict[tuple[str, str, int], Histogram] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            template = route_template(scope) or "unmatched"
            key = (template, scope["method"], status)
            child = self._children.get(key)
            if child is None:
                method = scope["method"] if scope["method"] in _METHODS else "other"
                child = metrics.REQUEST_SECONDS.labels(
                    template, method, metrics.status_class(status)
                )
                self._children[key] = child
            child.observe(time.perf_counter() - start)


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

PoolFigures = Callable[[], Iterable[tuple[str, int, int | None]]]


def pools_of(engines: dict[str, Engine], drivers: dict[str, DriverPool | None]) -> PoolFigures:
    """(pool, in use, waiting) of each pool: SQLAlchemy's say how many connections are
    checked out (their waiters are not public); psycopg's pools say both."""

    def read() -> Iterable[tuple[str, int, int | None]]:
        for name, engine in engines.items():
            checkedout = getattr(engine.pool, "checkedout", None)
            if checkedout is not None:
                yield name, int(checkedout()), None
        for name, pool in drivers.items():
            if pool is not None:
                in_use, waiting = pool.figures()
                yield name, in_use, waiting

    return read


def sample_pools(read: PoolFigures) -> None:
    for name, in_use, waiting in read():
        metrics.POOL_IN_USE.labels(name).set(in_use)
        if waiting is not None:
            metrics.POOL_WAITING.labels(name).set(waiting)


async def keep_sampling(read: PoolFigures, every_s: float = POOL_SAMPLE_S) -> None:
    """Every process samples its own pools (a scrape reaches only one process; with
    several, each one's figures are in the directory they share)."""
    while True:
        with contextlib.suppress(Exception):
            sample_pools(read)
        await asyncio.sleep(every_s)


def scrape(
    engine: Engine,
    projections: list[Projection],
    relay: NatsRelay | None,
    read_pools: PoolFigures,
    more: Callable[[], bytes],
) -> Scrape:
    """What ``GET /metrics`` adds to the queue gauges for a key of a tenant: every
    ``prometheus_client`` metric (this process's, or every process's) as that tenant may
    see them (``metrics.exposition``), the lag gauges read now, and ``more``."""

    async def read_lags() -> tuple[list[ProjectionStatus], RelayStatus | None]:
        async with engine.connect() as conn:
            found = await fetch_status(conn, projections)
            relay_status = (
                None
                if relay is None
                else await fetch_relay_status(conn, relay.config.stream, relay.config.tenants)
            )
        return found, relay_status

    async def answer(tenant: str, database_answered: bool = True) -> bytes:
        """``database_answered``: whether the caller's own read of the database did (if
        not, it is not asked again: one wait for a silent database is enough)."""
        sample_pools(read_pools)
        read = await from_database(read_lags()) if database_answered else None
        up = metrics.GaugeMetricFamily(
            "causeway_metrics_database_up",
            "1 when this scrape read the gauges kept in the database (queues, lags), 0 when "
            f"the database did not answer within {DATABASE_S:g} s: they are left out",
        )
        up.add_metric([], 1 if read is not None else 0)
        if read is None:
            return metrics.exposition(tenant) + metrics.figures([up]) + more()
        found, relay_status = read
        lag_events = _lag("causeway_projection_lag_events", "Events", "projection")
        lag_s = _lag("causeway_projection_lag_seconds", "Seconds", "projection")
        for status in found:
            lag_events.add_metric([status.name], status.lag_events)
            lag_s.add_metric([status.name], status.lag_seconds)
        lags = [lag_events, lag_s]
        if relay_status is not None:
            relay_events = _lag("causeway_relay_lag_events", "Events", "stream")
            relay_s = _lag("causeway_relay_lag_seconds", "Seconds", "stream")
            relay_events.add_metric([relay_status.stream], relay_status.lag_events)
            relay_s.add_metric([relay_status.stream], relay_status.lag_seconds)
            lags += [relay_events, relay_s]
        return metrics.exposition(tenant) + metrics.figures([up, *lags]) + more()

    return answer


async def from_database(read: Coroutine[Any, Any, T]) -> T | None:
    """What ``read`` reads in the database, or None when the database does not answer it
    (refused, lost, or silent past ``DATABASE_S``): a scrape then gives the process's own
    figures without it, which are wanted most while the database is away."""
    try:
        return await within(read, DATABASE_S, left=NOTHING_LEFT)
    except TimeoutError:
        return None
    except Exception as exc:
        if is_unavailable(exc) or isinstance(exc, OSError):
            return None
        raise


def _lag(name: str, unit: str, label: str) -> metrics.GaugeMetricFamily:
    what = "the relay" if label == "stream" else "each projection"
    help_text = f"How far {what} lags the head of the log, in {unit.lower()} (as GET /projections)"
    return metrics.GaugeMetricFamily(name, help_text, labels=[label])


def pools_in(state: Any) -> PoolFigures:
    """The pools of the app whose ``app.state`` this is (``app.main.create_app``)."""
    engines = {
        "main": state.engine,
        "decisions": state.decisions_engine,
        "graphql": state.graphql_reads,
    }
    return pools_of(engines, {"walks": state.walks})


def scrape_of(state: Any) -> Scrape:
    """``scrape`` for the app whose ``app.state`` this is, the replicas' gauges appended."""
    metrics.configure(max_tenants=state.settings.metrics_max_tenants)
    return scrape(
        state.engine,
        state.runner.projections,
        state.relay,
        pools_in(state),
        state.read_router.exposition,
    )
