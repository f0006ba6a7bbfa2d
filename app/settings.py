"""Every setting Causeway reads, from ``CAUSEWAY_*`` variables or ``.env``.

Only the composition roots (``app.main``, ``app.cli``) build a ``Settings``; everything
else is handed the values it needs. Each field is documented in README.md, and a unit
test keeps that table and this class in step.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import psycopg
from psycopg.conninfo import conninfo_to_dict
from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

# The names a tenant can have (an API key's; app.store.keys creates them).
TENANT_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}\Z")


class Settings(BaseSettings):
    # No setting is infinite or NaN: an infinite key cache TTL kept a revoked key working
    # for the life of the process, and an infinite interval stopped what waits on it.
    model_config = SettingsConfigDict(
        env_prefix="CAUSEWAY_", env_file=".env", extra="ignore", frozen=True, allow_inf_nan=False
    )

    # None: start the embedded PostgreSQL. A plain string, not PostgresDsn: libpq URLs may
    # name a socket folder instead of a host (postgresql://user@/db?host=/run/postgresql).
    database_url: str | None = None
    # Read replicas (app.web.reads, docs/replicas.md): one URL or several, comma-separated;
    # a replica further behind than read_max_lag_s is skipped; a read that names a
    # position waits read_wait_ms at most for its source to reach it.
    read_database_url: str | None = None
    read_max_lag_s: float = Field(default=10.0, gt=0)
    read_wait_ms: int = Field(default=2000, ge=0, le=600_000)
    data_dir: Path = Path(".causeway")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    workers: int = Field(default=1, ge=1)
    access_log: bool = False  # one log line per request costs a measurable share of a small POST
    # "text" (a line a human reads) or "json" (one object per line: app.telemetry.logs)
    log_format: Literal["text", "json"] = "text"
    # The app's guards on a connection (app.web.timeouts, docs/deployment.md): the time
    # between two reads of a body; the time a client may take no byte of its answer.
    body_timeout_s: float = Field(default=30.0, gt=0)
    send_timeout_s: float = Field(default=60.0, gt=0)
    # After an answer given before its body was read (a 413, a 401): read at most this
    # much more of the body, for at most this long, then close (app.web.timeouts).
    linger_bytes: int = Field(default=32 << 20, ge=0)
    linger_s: float = Field(default=5.0, ge=0)
    # After SIGTERM, what still runs (watches, replays) is cut once this has passed.
    shutdown_timeout_s: int = Field(default=25, ge=0, le=3600)
    db_pool_size: int = Field(default=5, ge=1)
    key_cache_ttl_s: float = Field(default=5.0, ge=0)
    # At most 2048: an attribute is indexed (id, stream, source, type, ...), and a btree
    # entry holds 2704 bytes; past it PostgreSQL refuses the row, not the request.
    max_attributes_bytes: int = Field(default=1024, ge=128, le=2048)
    max_event_data_bytes: int = Field(default=1 << 20, ge=1)
    max_request_bytes: int = Field(default=16 << 20, ge=1)
    max_batch_events: int = Field(default=10_000, ge=1)
    # An event stamped more than this ahead of the server's clock is refused (422); None: off.
    # At most a hundred years: past about 2.7e11 s the server's clock plus it is no date.
    max_future_s: float | None = Field(default=None, gt=0, le=3_153_600_000)
    # The JSON endpoints but POST /events, GraphQL and task completions (app.web.bodies)
    max_json_body_bytes: int = Field(default=256 << 10, ge=1024)
    replay_fetch_rows: int = Field(default=1000, ge=1, le=1_000_000)  # FETCH takes 32 bits
    replay_max_streams: int = Field(default=8, ge=1)
    # Tenants with a label of their own on causeway_events_appended_total; later ones: "other"
    metrics_max_tenants: int = Field(default=100, ge=0)
    run_projections: bool = True  # serve runs the projection runner (one leader per projection)
    projection_poll_interval_s: float = Field(default=1.0, gt=0)
    # Clock drift (app.projections.drift, docs/observability.md): a source's median drift
    # past this, either way, raises an alert event (unset: none, as events with past times,
    # a backfill's, an OpenLineage run's, are common); the first N sources get metric labels.
    drift_alert_s: float | None = Field(default=None, gt=0)
    drift_max_sources: int = Field(default=100, ge=0, le=10_000)
    statement_timeout_ms: int = Field(default=30_000, ge=0, le=2**31 - 1)  # PostgreSQL's int
    graphql_max_request_bytes: int = Field(default=1 << 20, ge=1024)
    graphql_max_query_depth: int = Field(default=12, ge=1)
    graphql_max_tokens: int = Field(default=2000, ge=10)
    graphql_max_aliases: int = Field(default=20, ge=0)
    graphql_max_selections: int = Field(default=1000, ge=1)  # fragments expanded
    graphql_max_fragments: int = Field(default=32, ge=0)
    graphql_max_page_size: int = Field(default=500, ge=1)
    graphql_max_lineage_depth: int = Field(default=100, ge=1)
    graphql_max_lineage_nodes: int = Field(default=10_000, ge=1, le=2**31 - 1)  # an int of SQL
    graphql_timeout_ms: int = Field(default=5000, ge=1, le=2**31 - 1)  # a statement_timeout
    graphql_max_answer_items: int = Field(default=100_000, ge=1)
    graphql_max_answer_bytes: int = Field(default=128 << 20, ge=1024)
    run_scheduler: bool = True  # serve expires leases and refreshes autoscale advice
    scheduler_lease_s: float = Field(default=30.0, gt=0, le=86_400)
    scheduler_max_lease_s: float = Field(default=3600.0, gt=0, le=86_400)
    scheduler_max_wait_s: float = Field(default=30.0, ge=0, le=300)
    scheduler_sweep_interval_s: float = Field(default=1.0, gt=0)
    # Rows of finished tasks (completed, superseded, discarded) are deleted this long after
    # they finished (their decisions stay in the log); 0 keeps them for ever.
    scheduler_task_retention_s: float = Field(default=604_800.0, ge=0, le=3_153_600_000)
    # UTC hours "START-END" (e.g. "22-6") when tasks of priority <= the max go to spot workers only
    scheduler_off_peak_hours: str | None = None
    # At most 7: priorities 8 and 9 are guaranteed, never held back for spot workers.
    scheduler_off_peak_max_priority: int = Field(default=3, ge=0, le=7)
    scheduler_autoscale_interval_s: float = Field(default=15.0, gt=0, le=86_400)
    scheduler_target_latency_s: float = Field(default=5.0, ge=0.01, le=86_400)
    scheduler_min_workers: int = Field(default=1, ge=0, le=2**31 - 1)  # an integer column
    scheduler_max_workers: int = Field(default=64, ge=1, le=2**31 - 1)
    scheduler_max_step: int = Field(default=4, ge=1)
    # The relay to NATS JetStream (docs/relay.md): on with a URL (several, comma-separated,
    # for a cluster); `causeway relay nats` runs it alone, `serve` runs it beside the app.
    nats_url: str | None = None
    nats_stream: str = "CAUSEWAY"
    nats_replicas: int = Field(default=1, ge=1, le=5)  # JetStream's most
    # Unset: every tenant. "a,b": only these. "-a,-b": every tenant but these.
    nats_tenants: str | None = None
    nats_mode: Literal["structured", "binary"] = "structured"
    nats_ack_timeout_s: float = Field(default=5.0, gt=0, le=300)
    # At least twice the ack timeout: see docs/relay.md, "The duplicate window".
    nats_duplicate_window_s: float = Field(default=120.0, ge=1, le=86_400)
    nats_max_pending: int = Field(default=4000, ge=1, le=1_000_000)  # acks in flight
    # A batch the relay reads ends at whichever comes first (docs/relay.md, "Batches").
    nats_batch_events: int = Field(default=10_000, ge=1, le=100_000)
    nats_batch_bytes: int = Field(default=16 << 20, ge=1 << 10, le=1 << 30)

    @field_validator("scheduler_max_workers")
    @classmethod
    def _at_least_the_least(cls, value: int, info: ValidationInfo) -> int:
        least = info.data.get("scheduler_min_workers")
        if least is not None and value < least:
            raise ValueError(
                f"CAUSEWAY_SCHEDULER_MIN_WORKERS ({least}) is above the most workers ({value})"
            )
        return value

    @field_validator("scheduler_task_retention_s")
    @classmethod
    def _long_enough_to_be_read(cls, value: float) -> float:
        # Queue signals (latency, throughput) read the rows of recently finished tasks.
        if 0 < value < 3600:
            raise ValueError("must be 0 (keep rows for ever) or at least 3600 seconds")
        return value

    @field_validator("scheduler_autoscale_interval_s")
    @classmethod
    def _within_the_retention(cls, value: float, info: ValidationInfo) -> float:
        # A step reads the waits of the tasks leased since the last one from their rows:
        # rows pruned before it ends would leave their waits out.
        retention_s = info.data.get("scheduler_task_retention_s")
        if retention_s and value > retention_s:
            raise ValueError(
                f"must be at most CAUSEWAY_SCHEDULER_TASK_RETENTION_S ({retention_s:g} s): "
                "a step reads the rows of the tasks leased since the last one"
            )
        return value

    @field_validator("scheduler_off_peak_hours")
    @classmethod
    def _are_hours(cls, value: str | None) -> str | None:
        if value and not re.fullmatch(r"\s*([01]?\d|2[0-3])\s*-\s*([01]?\d|2[0-4])\s*", value):
            raise ValueError("must be 'START-END' in whole UTC hours, e.g. '22-6'")
        return value or None

    @field_validator("read_database_url")
    @classmethod
    def _are_postgres_urls(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        for url in split_urls(value):
            cls._is_postgres_url(url)
        return value

    @property
    def read_database_urls(self) -> list[str]:
        """The replicas' URLs, in the order given (none: every read is on the primary)."""
        return split_urls(self.read_database_url or "")

    @field_validator("nats_stream")
    @classmethod
    def _is_stream_name(cls, value: str) -> str:
        # JetStream refuses names with whitespace, '.', '*', '>' (and '/', '\\' from 2.14).
        if not re.fullmatch(r"[^\s.*>/\\]{1,255}", value):
            raise ValueError(
                "must be a JetStream stream name: no whitespace, '.', '*', '>', '/', '\\'"
            )
        return value

    @field_validator("nats_tenants")
    @classmethod
    def _is_tenant_list(cls, value: str | None) -> str | None:
        names = [n.strip() for n in (value or "").split(",") if n.strip()]
        if names and len({n.startswith("-") for n in names}) > 1:
            raise ValueError("list tenants to relay ('a,b') or to leave out ('-a,-b'), not both")
        for name in names:
            # A name no key can have (a capital, a bare '-') is a typo: the relay would
            # send none of its events, or every tenant's.
            if not TENANT_PATTERN.match(name.removeprefix("-")):
                raise ValueError(
                    f"{name!r} names no tenant a key can have: 1-63 of a-z, 0-9, '_', '.', "
                    "'-', starting with a letter or digit"
                )
        return ",".join(names) or None

    @field_validator("nats_duplicate_window_s")
    @classmethod
    def _outlasts_a_retry(cls, value: float, info: ValidationInfo) -> float:
        ack_timeout_s = info.data.get("nats_ack_timeout_s")
        if ack_timeout_s is not None and value < 2 * ack_timeout_s:
            raise ValueError(
                f"must be at least twice CAUSEWAY_NATS_ACK_TIMEOUT_S ({ack_timeout_s} s): "
                "a message is published again at most that long after its first try"
            )
        return value

    @field_validator("nats_url")
    @classmethod
    def _are_nats_urls(cls, value: str | None) -> str | None:
        urls = [u.strip() for u in (value or "").split(",") if u.strip()]
        for url in urls:
            if not re.fullmatch(r"(nats|tls)://[^\s/]+/?", url):
                raise ValueError(f"{url!r} is not a nats:// or tls:// server URL")
        return ",".join(urls) or None

    @field_validator("database_url")
    @classmethod
    def _is_postgres_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            url = make_url(value)
        except ArgumentError as exc:
            raise ValueError(f"not a database URL: {exc}") from exc
        if url.get_backend_name() != "postgresql":
            raise ValueError("must be a postgresql:// URL")
        # What libpq would refuse only when a command connects (an unknown option, a port
        # that is no number), refused here: every command then says so in one line.
        try:
            options = conninfo_to_dict(
                url.set(drivername="postgresql").render_as_string(hide_password=False)
            )
        except psycopg.ProgrammingError as exc:
            raise ValueError(f"not a libpq connection URL: {str(exc).strip()}") from exc
        for name in ("port", "connect_timeout"):
            given = options.get(name)
            if given is not None and not all(p.strip().isdigit() for p in str(given).split(",")):
                raise ValueError(f"{name} must be a whole number, got {given!r}")
        if "options" in options:
            # Every engine sets its sessions' options itself (the role, the time zone, the
            # statement timeout), which replace these, while Alembic keeps them: a
            # search_path here had `migrate` build a schema no other command looked in.
            raise ValueError(
                "takes no options= (Causeway sets its sessions' options, and keeps its tables "
                "in schema public: give the service a database of its own instead)"
            )
        return value


def split_urls(text: str) -> list[str]:
    """The URLs of a comma-separated list. A comma inside one URL (libpq's host list,
    ``postgresql://h1,h2/db``) does not split it: a URL starts at a scheme."""
    parts = re.split(r",\s*(?=[A-Za-z][A-Za-z0-9+.-]*://)", text.strip())
    return [part.strip() for part in parts if part.strip()]
