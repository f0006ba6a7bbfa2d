"""The schema as SQLAlchemy Core tables: what the code reads and writes.

Migrations own the schema (``migrations/versions``); these definitions must match them,
and an integration test runs Alembic's ``check`` to prove it. Constraint names come from
the naming convention, so code may match on them.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "%(table_name)s_%(column_0_N_name)s_key",
    "ck": "%(table_name)s_%(constraint_name)s_check",
    "fk": "%(table_name)s_%(column_0_name)s_fkey",
    "pk": "%(table_name)s_pkey",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

# One row per event, never updated or deleted (triggers refuse it). ``position`` is dense
# and assigned under the ``log_head`` row lock, so commit order equals position order.
events = Table(
    "events",
    metadata,
    Column("position", BigInteger, primary_key=True, autoincrement=False),
    Column("tenant", Text, nullable=False),
    Column("id", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("subject", Text),
    # ``time`` is for range filters (microseconds); ``time_rfc3339`` is the text as sent,
    # so nanosecond digits and the offset round-trip exactly.
    Column("time", DateTime(timezone=True)),
    Column("time_rfc3339", Text),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    Column("stream", Text, nullable=False),
    Column("stream_version", BigInteger, nullable=False),
    Column("datacontenttype", Text),
    Column("dataschema", Text),
    # JSON content lives in ``data`` (SQL NULL: no data; JSON null: an explicit null);
    # anything else in ``data_binary``. At most one of them is set.
    Column("data", JSONB(none_as_null=True)),
    Column("data_binary", LargeBinary),
    Column("extensions", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("causes", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("correlation_id", Text),
    Column("model_name", Text),
    Column("model_version", Text),
    Column("model_signature", Text),
    Column("prev_hash", LargeBinary, nullable=False),
    Column("hash", LargeBinary, nullable=False),
    CheckConstraint("position > 0", name="position_positive"),
    CheckConstraint("stream_version > 0", name="stream_version_positive"),
    CheckConstraint("data IS NULL OR data_binary IS NULL", name="one_data_column"),
    CheckConstraint("octet_length(hash) = 32", name="hash_length"),
)
# What each index of ``events`` is for. Every one costs each append 1-2 us a row
# (``bench/indexes.py``: COPY into a table with only the lean three (the primary key on
# position, the two unique keys below) against the same with one more index each: all nine
# cost 8.4 us a row more than the lean three, 0.57x their COPY rate). The six beyond the
# lean three each serve one documented filter of the log's reads: ``GET /replay`` (NDJSON
# and Parquet) and GraphQL's ``events``, both through ``app.store.reads.apply_filter``,
# which always narrows to one tenant and reads in position order; without its index a
# filter reads the tenant's whole log. The primary key on position is the log's order
# (projections, the relay, verification, the walks' joins).
# An event id once per tenant: idempotency (``app.store.log`` ``_FETCH_KNOWN``), ``GET
# /events/{id}`` and GraphQL's ``event``, and the causes an append names.
Index("events_tenant_id_key", events.c.tenant, events.c.id, unique=True)
# One version per stream: optimistic concurrency (``expected_version``), the appender's next
# version (``_FETCH_VERSIONS``), and the ``stream`` filter (with ``from_version``).
Index(
    "events_tenant_stream_stream_version_key",
    events.c.tenant,
    events.c.stream,
    events.c.stream_version,
    unique=True,
)
# A tenant's log in order, no filter but time or position: replay, the export, GraphQL's
# ``events`` with no filter.
Index("ix_events_tenant_position", events.c.tenant, events.c.position)
# ``types=`` (one or several): replay, and GraphQL's ``events(filter: {types})``.
Index("ix_events_tenant_type_position", events.c.tenant, events.c.type, events.c.position)
# ``source=``: replay, and GraphQL's ``events(filter: {source})``.
Index("ix_events_tenant_source_position", events.c.tenant, events.c.source, events.c.position)
# ``correlationid=``: a workflow run's events; replay, and GraphQL's
# ``events(filter: {correlationId})``.
Index(
    "ix_events_tenant_correlation_id_position",
    events.c.tenant,
    events.c.correlation_id,
    events.c.position,
)
# ``modelname=`` with or without ``modelversion=``: a model's decisions; replay, and
# GraphQL's ``events(filter: {modelName, modelVersion})``.
Index(
    "ix_events_tenant_model_name_model_version_position",
    events.c.tenant,
    events.c.model_name,
    events.c.model_version,
    events.c.position,
)
# ``since=`` / ``until=`` (the events' own time, not their order): replay, and GraphQL's
# ``events(filter: {timeFrom, timeTo})``.
Index("ix_events_tenant_time", events.c.tenant, events.c.time)

# The causal graph, by position, indexed both ways: ``effect`` was derived from ``cause``.
event_causes = Table(
    "event_causes",
    metadata,
    Column("effect", BigInteger, ForeignKey("events.position"), primary_key=True),
    Column("cause", BigInteger, ForeignKey("events.position"), primary_key=True),
    CheckConstraint("cause < effect", name="cause_before_effect"),
)
Index("ix_event_causes_cause_effect", event_causes.c.cause, event_causes.c.effect)

# The tail of the global log: one row. Appenders lock it first (SELECT ... FOR UPDATE),
# which serialises appends across processes and gives the chain its previous hash.
log_head = Table(
    "log_head",
    metadata,
    Column("singleton", Boolean, primary_key=True, server_default=text("true")),
    Column("position", BigInteger, nullable=False),
    Column("hash", LargeBinary, nullable=False),
    CheckConstraint("singleton", name="one_row"),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("key_id", Text, primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("scopes", ARRAY(Text), nullable=False),
    Column("secret_sha256", LargeBinary, nullable=False),
    Column("description", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("revoked_at", DateTime(timezone=True)),
)

# One row per projection: how far it has applied the log, and its last failure.
projection_checkpoints = Table(
    "projection_checkpoints",
    metadata,
    Column("name", Text, primary_key=True),
    Column("position", BigInteger, nullable=False, server_default=text("0")),
    Column("updated_at", DateTime(timezone=True)),
    Column("last_error", Text),
    Column("error_position", BigInteger),
    # A batch's error (its flush or tally failed at no event of its own): the batch's
    # last event; error_position is its first. NULL: the error is error_position's own.
    Column("error_through", BigInteger),
    Column("failures", Integer, nullable=False, server_default=text("0")),
    Column("rebuild_requested", Boolean, nullable=False, server_default=text("false")),
)

# Events an operator told a projection to pass over (``causeway projections skip``): each
# was the event the projection had stopped at, failing. Positions never change, so a
# rebuild passes over the same events.
projection_skips = Table(
    "projection_skips",
    metadata,
    Column("name", Text, primary_key=True),
    Column("position", BigInteger, primary_key=True),
    Column("reason", Text, nullable=False),
    Column("error", Text),
    Column("skipped_at", DateTime(timezone=True), nullable=False),
)

# Read models of the model registry projection (app/projections/model_registry.py).
model_versions = Table(
    "model_versions",
    metadata,
    Column("tenant", Text, primary_key=True),
    Column("name", Text, primary_key=True),
    Column("version", Text, primary_key=True),
    Column("signature", JSONB, nullable=False),
    Column("signature_digest", Text, nullable=False),
    Column("tags", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("enforce_outputs", Boolean, nullable=False, server_default=text("false")),
    Column("registered_at", DateTime(timezone=True), nullable=False),
    Column("position", BigInteger, nullable=False),
)

model_aliases = Table(
    "model_aliases",
    metadata,
    Column("tenant", Text, primary_key=True),
    Column("name", Text, primary_key=True),
    Column("alias", Text, primary_key=True),
    Column("version", Text, nullable=False),
    Column("position", BigInteger, nullable=False),
)

# Read models of the deployments projection (app/projections/deployments.py): the state
# of each service now, and after each of its events (for history and as-of queries).
deployments = Table(
    "deployments",
    metadata,
    Column("tenant", Text, primary_key=True),
    Column("service", Text, primary_key=True),
    Column("model", Text),
    Column("stable_version", Text),
    Column("candidate_version", Text),
    Column("candidate_percent", Integer, nullable=False),
    Column("previous_stable", ARRAY(Text), nullable=False),
    Column("status", Text, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("position", BigInteger, nullable=False),
)

deployment_history = Table(
    "deployment_history",
    metadata,
    Column("tenant", Text, primary_key=True),
    Column("service", Text, primary_key=True),
    Column("position", BigInteger, primary_key=True),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("action", Text, nullable=False),
    Column("model", Text),
    Column("stable_version", Text),
    Column("candidate_version", Text),
    Column("candidate_percent", Integer, nullable=False),
    Column("reason", Text),
    Column("actor", Text),
    Column("event_id", Text, nullable=False),
)

# Read model of the drift projection (app/projections/drift.py): per source, the drift
# of its events of the last minute ([recorded_at, drift] in microseconds, oldest first,
# at most a bounded number) and whether it is in alert.
drift_sources = Table(
    "drift_sources",
    metadata,
    Column("tenant", Text, primary_key=True),
    Column("source", Text, primary_key=True),
    Column("samples", JSONB, nullable=False),
    Column("alerting", Boolean, nullable=False),
    Column("position", BigInteger, nullable=False),
)

# Read models of the scheduler (scheduler/): routes, tasks, pre-warm windows and autoscale
# state. ``tasks`` is written by the commands that decide, as they append (scheduler.queue),
# and followed by its projection behind them.
routes = Table(
    "routes",
    metadata,
    Column("tenant", Text, primary_key=True),
    Column("id", Text, primary_key=True),
    Column("spec", JSONB, nullable=False),
    Column("position", BigInteger, nullable=False),
)

tasks = Table(
    "tasks",
    metadata,
    Column("tenant", Text, primary_key=True),
    Column("id", Text, primary_key=True),
    Column("route_id", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("queue", Text, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("req_numbers", JSONB, nullable=False),
    Column("req_flags", ARRAY(Text), nullable=False),
    Column("req_labels", JSONB, nullable=False),
    Column("trigger_id", Text, nullable=False),
    Column("trigger_type", Text, nullable=False),
    Column("trigger_time", DateTime(timezone=True), nullable=False),
    Column("debounce_key", Text),
    Column("state", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("max_retries", Integer, nullable=False),
    Column("backoff_base_s", Float, nullable=False),
    Column("service", Text),
    Column("on_model_mismatch", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("available_at", DateTime(timezone=True), nullable=False),
    Column("lease_id", Text),
    Column("worker", Text),
    Column("leased_at", DateTime(timezone=True)),
    Column("lease_expires_at", DateTime(timezone=True)),
    Column("error_class", Text),
    Column("error", Text),
    Column("disposition", Text),
    Column("finished_at", DateTime(timezone=True)),
    Column("seq", BigInteger, nullable=False),
    Column("version", Integer, nullable=False),
    Column("position", BigInteger, nullable=False),
    # The worker's name for the request that leased the task, while it is leased: a retry
    # of that request (its answer lost) gets these leases back (migration 0018).
    Column("lease_request", Text),
    # The attribute debounce_key is the value of (migration 0019; None: made before it).
    Column("debounce_on", Text),
    CheckConstraint(
        "state IN ('ready', 'leased', 'completed', 'superseded', 'dead', 'discarded')",
        name="state",
    ),
    Index(
        "ix_tasks_ready",
        "tenant",
        "queue",
        text("priority DESC"),
        "seq",
        postgresql_where=text("state = 'ready'"),
    ),
    Index("ix_tasks_leased", "lease_expires_at", postgresql_where=text("state = 'leased'")),
    # Serves scheduler.rows.tasks.fetch_held_by_request (a lease request sent again).
    Index(
        "ix_tasks_lease_request",
        "tenant",
        "lease_request",
        postgresql_where=text("state = 'leased' AND lease_request IS NOT NULL"),
    ),
    # A digest of the key: a key is event content of any length, a btree entry is not.
    # Every state: the dispatcher supersedes ready tasks of a key (``rows.debounced``), a
    # failed attempt is superseded by a newer task of its key (the same module).
    Index(
        "ix_tasks_debounce_key",
        "tenant",
        "route_id",
        text("md5(debounce_key)"),
        postgresql_where=text("debounce_key IS NOT NULL"),
    ),
    Index("ix_tasks_dead", "tenant", "finished_at", postgresql_where=text("state = 'dead'")),
    Index(
        "ix_tasks_finished",
        "finished_at",
        postgresql_where=text("state IN ('completed', 'superseded', 'discarded')"),
    ),
)

prewarm_windows = Table(
    "prewarm_windows",
    metadata,
    Column("tenant", Text, primary_key=True),
    Column("route_id", Text, primary_key=True),
    Column("source", Text, primary_key=True),
    Column("recent", JSONB, nullable=False),
)

queue_autoscale = Table(
    "queue_autoscale",
    metadata,
    Column("tenant", Text, primary_key=True),
    Column("queue", Text, primary_key=True),
    Column("recommended", Integer, nullable=False),
    Column("integral", Float, nullable=False),
    Column("last_error", Float, nullable=False),
    Column("observed_s", Float, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)
