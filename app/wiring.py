"""How the settings become the service's parts: the limits and policies its faces are
handed, every projection, the projection runner, the relay, and the read connections
(the primary's and each replica's). A composition root with ``app.main``, which
assembles them into the app, and ``app.cli``, which runs some of them on their own."""

from __future__ import annotations

from functools import partial

from sqlalchemy import URL

from app.db.engine import SERVICE_ROLE, DriverPool, Engine, create_engine, libpq_conninfo
from app.graphql.limits import GraphQLLimits
from app.projections.base import Projection
from app.projections.deployments import Deployments
from app.projections.drift import DRIFT_BATCH, DRIFT_GATHER_S, DriftWatch
from app.projections.model_registry import ModelRegistry
from app.projections.relay.relay import NatsRelay, RelayConfig
from app.projections.relay.subjects import Tenants
from app.projections.runner import ProjectionRunner
from app.settings import Settings
from app.store.replication import ANSWER_S, FallbackConnector, replica_name
from app.web.reads import ReadRouter, ReadSource
from ingest.limits import Limits
from scheduler.placement import OffPeak
from scheduler.projections import DISPATCH_BATCH, Dispatcher, scheduler_projections
from scheduler.router import LeasePolicy


def limits_from(settings: Settings) -> Limits:
    return Limits(
        max_attributes_bytes=settings.max_attributes_bytes,
        max_event_data_bytes=settings.max_event_data_bytes,
        max_request_bytes=settings.max_request_bytes,
        max_batch_events=settings.max_batch_events,
        max_future_s=settings.max_future_s,
    )


def graphql_limits_from(settings: Settings) -> GraphQLLimits:
    return GraphQLLimits(
        max_request_bytes=settings.graphql_max_request_bytes,
        max_query_depth=settings.graphql_max_query_depth,
        max_tokens=settings.graphql_max_tokens,
        max_aliases=settings.graphql_max_aliases,
        max_selections=settings.graphql_max_selections,
        max_fragments=settings.graphql_max_fragments,
        max_page_size=settings.graphql_max_page_size,
        max_lineage_depth=settings.graphql_max_lineage_depth,
        max_lineage_nodes=settings.graphql_max_lineage_nodes,
        timeout_ms=settings.graphql_timeout_ms,
        max_answer_items=settings.graphql_max_answer_items,
        max_answer_bytes=settings.graphql_max_answer_bytes,
    )


def every_projection(settings: Settings | None = None) -> list[Projection]:
    """Every projection of the project, the one list: what serve runs and the CLI manages."""
    settings = settings or Settings()
    drift = DriftWatch(alert_s=settings.drift_alert_s, max_sources=settings.drift_max_sources)
    return [ModelRegistry(), Deployments(), drift, *scheduler_projections()]


def lease_policy_from(settings: Settings) -> LeasePolicy:
    return LeasePolicy(
        lease_s=settings.scheduler_lease_s,
        max_lease_s=settings.scheduler_max_lease_s,
        max_wait_s=settings.scheduler_max_wait_s,
        off_peak=OffPeak.parse(
            settings.scheduler_off_peak_hours, settings.scheduler_off_peak_max_priority
        ),
    )


def create_runner(settings: Settings, database_url: str | URL) -> ProjectionRunner:
    """The projection runner, on an engine of its own (a leader holds a connection)."""
    projections = every_projection(settings)
    engine = create_engine(
        database_url,
        pool_size=len(projections) + 2,
        statement_timeout_ms=settings.statement_timeout_ms,
    )
    return ProjectionRunner(
        engine,
        projections,
        listen_dsn=libpq_conninfo(database_url),
        poll_interval_s=settings.projection_poll_interval_s,
        batch_sizes={Dispatcher.name: DISPATCH_BATCH, DriftWatch.name: DRIFT_BATCH},
        gathers_s={DriftWatch.name: DRIFT_GATHER_S},
    )


def create_relay(settings: Settings, database_url: str | URL) -> NatsRelay | None:
    """The relay to NATS JetStream when ``CAUSEWAY_NATS_URL`` is set, on an engine of its
    own (its leader holds a connection); else None."""
    if settings.nats_url is None:
        return None
    engine = create_engine(
        database_url, pool_size=3, statement_timeout_ms=settings.statement_timeout_ms
    )
    config = RelayConfig(
        servers=settings.nats_url.split(","),
        stream=settings.nats_stream,
        replicas=settings.nats_replicas,
        tenants=Tenants.parse(settings.nats_tenants),
        mode=settings.nats_mode,
        duplicate_window_s=settings.nats_duplicate_window_s,
        ack_timeout_s=settings.nats_ack_timeout_s,
        max_pending=settings.nats_max_pending,
        batch_events=settings.nats_batch_events,
        batch_bytes=settings.nats_batch_bytes,
        poll_interval_s=settings.projection_poll_interval_s,
    )
    return NatsRelay(engine, config, listen_dsn=libpq_conninfo(database_url))


def graphql_connections(
    settings: Settings, database_url: str | URL, *, pre_ping: bool = False
) -> tuple[DriverPool, Engine]:
    """The walks' driver pool and the engine of GraphQL's other reads."""
    # GraphQL's lineage and audit walks, on sessions whose statement timeout is their
    # time budget: PostgreSQL stops a walk past it, however many a request asks for.
    # The walk's plan is the same whatever the event (an index lookup of the root, the
    # inlined causeway_walk, index joins), yet PostgreSQL kept planning it again for
    # each one: half a millisecond of an audit. Generic plans skip that. A walk is one
    # statement that only reads: no transaction around it. Two connections kept, twelve
    # at most; a walk waits for one as long as its time budget, and a second at least.
    walks = DriverPool(
        database_url,
        min_size=2,
        max_size=12,
        statement_timeout_ms=settings.graphql_timeout_ms,
        wait_s=max(settings.graphql_timeout_ms / 1000, 1.0),
        generic_plans=True,
        name="walks",
        # A replica's: a connection answers before it is handed out, within ANSWER_S,
        # as the other reads' pre-ping does (a frozen replica's walk hung for ever).
        answer_s=ANSWER_S if pre_ping else None,
    )
    # GraphQL's other reads (events, pages of causes and effects, models) likewise stop
    # at the time budget: on sessions of their own, whose statement timeout it is. Both
    # pools' sessions read as one tenant at a time (the service role, app.db.tenancy).
    graphql_reads = create_engine(
        database_url,
        role=SERVICE_ROLE,
        pool_size=settings.db_pool_size,
        statement_timeout_ms=settings.graphql_timeout_ms,
        pool_timeout_s=max(settings.graphql_timeout_ms / 1000, 1.0),  # as the walks wait
        pre_ping=pre_ping,
    )
    return walks, graphql_reads


def read_router_from(
    settings: Settings, engine: Engine, walks: DriverPool, graphql_reads: Engine
) -> ReadRouter:
    """Where reads run: the primary's connections, and each read replica's own."""
    primary_graphql = graphql_reads.execution_options(isolation_level="AUTOCOMMIT")
    primary = ReadSource(
        "primary", rest=engine, direct=engine, graphql=primary_graphql, walks=walks,
        is_primary=True,
    )  # fmt: skip
    replicas: list[ReadSource] = []
    router = ReadRouter(
        primary, replicas, max_lag_s=settings.read_max_lag_s, wait_ms=settings.read_wait_ms
    )
    for url in settings.read_database_urls:
        rest_engine = create_engine(
            url,
            pool_size=settings.db_pool_size,
            statement_timeout_ms=settings.statement_timeout_ms,
            pre_ping=True,
        )
        replica_walks, replica_graphql = graphql_connections(settings, url, pre_ping=True)
        graphql = replica_graphql.execution_options(isolation_level="AUTOCOMMIT")
        replica = ReadSource(
            replica_name(url),
            rest=engine,  # replaced below, once the replica exists to be marked down
            direct=rest_engine,
            graphql=graphql,
            walks=replica_walks,
            is_primary=False,
            engines=[rest_engine, replica_graphql],
        )
        on_failure = partial(router.mark_down, replica)
        replica.rest = FallbackConnector(rest_engine, engine, on_failure)
        replica.graphql = FallbackConnector(graphql, primary_graphql, on_failure)
        replicas.append(replica)
    return router
