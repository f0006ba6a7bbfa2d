"""The service's Prometheus metrics (``causeway_*``) and their exposition.

Every metric is a ``prometheus_client`` metric on its default registry, so a metric defined
anywhere else with ``prometheus_client`` (the clock-drift ones) is in the same answer.

Several server processes (``causeway serve --workers N``): ``serve`` makes an empty
directory and names it in ``PROMETHEUS_MULTIPROC_DIR`` before the workers start (so before
they import ``prometheus_client``, which picks where values live at import). Each process
then writes its values to files there, and ``exposition()`` reads every process's files
into a registry made for that scrape (``MultiProcessCollector``): one scrape, every
process's counts. Gauges say how the processes' values combine (``livesum``: the sum over
the living processes); each process marks itself dead when it exits, so its gauges leave
the sum. Custom collectors do not work in that mode, so nothing here is one: the gauges
whose figures live in the database (queue depths, replica lag, projection lag) are made
per scrape in a registry of their own by their owners and appended to this answer.

Label bounds (docs/observability.md, "Metrics"): ``tenant`` is one of the first
``CAUSEWAY_METRICS_MAX_TENANTS`` tenants a process appends for, the rest ``other``;
``route`` is a route template from the app's routing table (or ``unmatched``); the
others are closed sets named where each is defined. A scrape is a tenant's (its key's):
of the series labelled with a tenant it shows that tenant's and ``other``'s alone.
"""

from __future__ import annotations

import atexit
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily, Metric

__all__ = ["CONTENT_TYPE_LATEST", "GaugeMetricFamily", "exposition", "figures"]

MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
OTHER = "other"  # the label of every tenant past the bound; no key has it (app.store.keys)

# Seconds: the client's defaults with a boundary at the 300 ms an interactive answer
# should take, and room for the slow walks and long appends.
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0)
_GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 10_000)

EVENTS_APPENDED = Counter(
    "causeway_events_appended_total",
    "Events the store's writer answered, by tenant and outcome (stored: new; duplicate: "
    "an id stored before, answered as it was; refused: an event of a request the store "
    "refused, e.g. unknown causes or a stale expected version; failed: an event of a "
    "request the store could not answer, e.g. the database unreachable)",
    ["tenant", "outcome"],
)
REQUEST_SECONDS = Histogram(
    "causeway_http_request_duration_seconds",
    "HTTP requests, from their head to the end of their answer, by route template, method "
    "and status class (2xx, 3xx, 4xx, 5xx)",
    ["route", "method", "status"],
    buckets=_LATENCY_BUCKETS,
)
GROUP_EVENTS = Histogram(
    "causeway_append_group_events",
    "Events in each group the writer commits in one transaction",
    buckets=_GROUP_BUCKETS,
)
GROUP_REQUESTS = Histogram(
    "causeway_append_group_requests",
    "Append requests in each group the writer commits in one transaction",
    buckets=_GROUP_BUCKETS,
)
QUEUE_WAIT_SECONDS = Histogram(
    "causeway_append_queue_wait_seconds",
    "How long an append request waited in the writer's queue before its group was taken",
    buckets=_LATENCY_BUCKETS,
)
REPLAY_STREAMS = Gauge(
    "causeway_replay_streams_in_use",
    "Replays streaming now (each holds a database connection)",
    multiprocess_mode="livesum",
)
WALK_SECONDS = Histogram(
    "causeway_graphql_walk_duration_seconds",
    "GraphQL lineage and audit walks, on their connection, by outcome (ok, error)",
    ["outcome"],
    buckets=_LATENCY_BUCKETS,
)
WALK_TRUNCATIONS = Counter(
    "causeway_graphql_walk_truncations_total",
    "Lineage and audit answers that maxDepth, limit or a server cap cut short, by kind "
    "(lineage, audit)",
    ["kind"],
)
POOL_IN_USE = Gauge(
    "causeway_db_pool_connections_in_use",
    "Database connections checked out of the service's pools, by pool (a closed set: "
    "main, decisions, graphql, walks)",
    ["pool"],
    multiprocess_mode="livesum",
)
POOL_WAITING = Gauge(
    "causeway_db_pool_waiting",
    "Tasks waiting for a connection of a pool that has none free, by pool",
    ["pool"],
    multiprocess_mode="livesum",
)


class TenantLabels:
    """The ``tenant`` label of ``causeway_events_appended_total``: each of the first
    ``limit`` tenants its own, every later one ``other`` (per process). The children are
    kept, so an increment is a dict lookup and an add."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._children: dict[str, tuple[Counter, Counter, Counter, Counter]] = {}

    def counters(self, tenant: str) -> tuple[Counter, Counter, Counter, Counter]:
        """(stored, duplicate, refused, failed) for ``tenant``."""
        found = self._children.get(tenant)
        if found is None:
            label = tenant if len(self._children) < self.limit else OTHER
            found = tuple(  # type: ignore[assignment]
                EVENTS_APPENDED.labels(label, outcome)
                for outcome in ("stored", "duplicate", "refused", "failed")
            )
            self._children[tenant] = found  # type: ignore[assignment]  # keys name tenants
        return found  # type: ignore[return-value]


TENANTS = TenantLabels(100)


def configure(*, max_tenants: int) -> None:
    """The bound on tenant labels (``CAUSEWAY_METRICS_MAX_TENANTS``); the app sets it
    at start-up, before a request is answered."""
    TENANTS.limit = max_tenants


def count_appended(tenant: str, stored: int, duplicate: int) -> None:
    counters = TENANTS.counters(tenant)
    if stored:
        counters[0].inc(stored)
    if duplicate:
        counters[1].inc(duplicate)


def count_refused(tenant: str, events: int) -> None:
    TENANTS.counters(tenant)[2].inc(events)


def count_failed(tenant: str, events: int) -> None:
    TENANTS.counters(tenant)[3].inc(events)


def status_class(status: int) -> str:
    return _STATUS_CLASSES.get(status // 100, "5xx")


_STATUS_CLASSES = {1: "1xx", 2: "2xx", 3: "3xx", 4: "4xx", 5: "5xx"}


@contextmanager
def walk_timed() -> Iterator[None]:
    start = time.perf_counter()
    outcome = "error"
    try:
        yield
        outcome = "ok"
    finally:
        WALK_SECONDS.labels(outcome).observe(time.perf_counter() - start)


def exposition(tenant: str) -> bytes:
    """Every ``prometheus_client`` metric of this process, or of every process when
    ``PROMETHEUS_MULTIPROC_DIR`` is set (a registry made for this scrape), as a key of
    ``tenant`` may see them: of the series labelled with a tenant, only ``tenant``'s and
    the ``other`` bucket's (which names no tenant and no source)."""
    if MULTIPROCESS:
        every: CollectorRegistry = CollectorRegistry(support_collectors_without_names=True)
        multiprocess.MultiProcessCollector(every)  # type: ignore[no-untyped-call]
    else:
        every = REGISTRY
    seen = CollectorRegistry(support_collectors_without_names=True)
    seen.register(_TenantView(every, tenant))
    return generate_latest(seen)


def figures(families: Iterable[Metric]) -> bytes:
    """``families`` (each a ``GaugeMetricFamily`` of figures read for this scrape: queue
    depths, lags) in Prometheus' text format. Families, not ``Gauge`` objects: under
    ``PROMETHEUS_MULTIPROC_DIR`` a ``Gauge`` writes its values to the process's file
    whatever registry it is in, so every later scrape of every process showed them again,
    stale, with a ``pid`` label, and to every tenant's key."""
    registry = CollectorRegistry(support_collectors_without_names=True)
    registry.register(_Families(list(families)))
    return generate_latest(registry)


class _Families:
    """A collector of families made for one scrape."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class _TenantView:
    """A collector: ``every``'s families, less the series of tenants other than ``tenant``
    (a tenant's key never learns another tenant's name, nor its sources' names)."""

    def __init__(self, every: CollectorRegistry, tenant: str) -> None:
        self._every, self._shown = every, {tenant, OTHER}

    def collect(self) -> Iterator[Metric]:
        for family in self._every.collect():
            kept = Metric(family.name, family.documentation, family.type, family.unit)
            for s in family.samples:
                if s.labels.get("tenant", OTHER) in self._shown:
                    kept.add_sample(
                        s.name, s.labels, s.value, s.timestamp, s.exemplar, s.native_histogram
                    )
            yield kept


def _mark_dead() -> None:
    """This process's ``live*`` gauges leave the sum (its counters stay: they counted)."""
    multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


def leave() -> None:
    """With several processes, this one's gauges leave the sum: called as its service
    stops. (``atexit`` runs too late or never: uvicorn raises the SIGTERM it caught again
    after its shutdown, and the process dies of it.)"""
    if MULTIPROCESS:
        _mark_dead()


if MULTIPROCESS:
    atexit.register(_mark_dead)  # the other ways out
