"""``causeway relay nats`` (the relay to NATS JetStream alone) and ``causeway relay
status`` (its checkpoint and lag)."""

from __future__ import annotations

import asyncio
import contextlib

import typer
from sqlalchemy import URL

from app.cli.runtime import announce, database, fail, load_settings, require_head
from app.db.engine import create_engine
from app.db.schema import upgrade_to_head
from app.projections.relay.log import RelayStatus, fetch_relay_status
from app.projections.relay.subjects import Tenants
from app.settings import Settings
from app.telemetry import logs, tracing
from app.wiring import create_relay


def relay_nats() -> None:
    """Publish every event, in position order, to the JetStream stream CAUSEWAY_NATS_STREAM
    (several relays may run: one leads)."""
    settings = load_settings()
    if settings.nats_url is None:
        fail("set CAUSEWAY_NATS_URL to the NATS server(s) to relay to")
    logs.configure(settings.log_format)
    tracing.configure()  # its publish spans, when the OTEL_* variables ask for traces
    with database(settings) as db:
        if db.embedded is not None:
            upgrade_to_head(db.url)  # as serve does: the embedded one is this command's own
        else:
            require_head(db.url, "run `causeway migrate`")
        relay = create_relay(settings, db.url)
        if relay is None:  # pragma: no cover - nats_url is set
            return
        running = relay

        async def follow() -> None:
            # Said once the loop runs, so a Ctrl-C after it stops the relay cleanly.
            announce(
                settings,
                f"relaying {Tenants.parse(settings.nats_tenants).describe()} to "
                f"{settings.nats_stream} at {settings.nats_url}",
            )
            await running.run()

        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(follow())


def relay_status() -> None:
    """The relay's checkpoint, the head, and its lag in positions and seconds."""
    settings = load_settings()
    with database(settings) as db:
        status = asyncio.run(_status(settings, db.url))
    typer.echo(f"{'stream':<20} {'checkpoint':>10} {'head':>10} {'lag':>8} {'lag_s':>8}  tenants")
    typer.echo(
        f"{status.stream:<20} {status.checkpoint:>10} {status.head:>10} "
        f"{status.lag_events:>8} {status.lag_seconds:>8.1f}  {status.tenants}"
    )


async def _status(settings: Settings, url: URL | str) -> RelayStatus:
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            return await fetch_relay_status(
                conn, settings.nats_stream, Tenants.parse(settings.nats_tenants)
            )
    finally:
        await engine.dispose()
