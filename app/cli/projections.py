"""``causeway project`` (the projection runner alone) and ``causeway projections``:
status, rebuild, skip and unskip."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable
from datetime import UTC
from typing import Annotated, TypeVar

import psycopg
import typer
from sqlalchemy import URL
from sqlalchemy.exc import DBAPIError

from app.cli.runtime import (
    announce,
    database,
    fail,
    load_settings,
    require_head,
    utf8,
)
from app.db.engine import create_engine
from app.db.schema import upgrade_to_head
from app.errors import AppError
from app.projections.base import Projection
from app.projections.batches import ProjectionFailed
from app.projections.runner import ProjectionRunner
from app.projections.status import ProjectionStatus, Skip, fetch_skips, fetch_status
from app.store.failures import is_connection_lost
from app.store.records import parse_position
from app.telemetry import logs, tracing
from app.wiring import create_runner, every_projection

T = TypeVar("T")


def project() -> None:
    """Run the projection runner alone (several may run: one leads each projection)."""
    settings = load_settings()
    logs.configure(settings.log_format)
    tracing.configure()  # projection batch spans, when the OTEL_* variables ask for traces
    with database(settings) as db:
        if db.embedded is not None:
            upgrade_to_head(db.url)  # as serve does: the embedded one is this command's own
        else:
            require_head(db.url, "run `causeway migrate`")
        runner = create_runner(settings, db.url)

        async def follow() -> None:
            # Said once the loop runs: a Ctrl-C from here on stops the runner cleanly
            # (one while asyncio.run was still making its loop left it half made).
            announce(settings, f"following {', '.join(p.name for p in runner.projections)}")
            await runner.run()

        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(follow())


def projections_status() -> None:
    """Each projection's checkpoint, the head, the lag in events and seconds, errors."""
    settings = load_settings()
    with database(settings) as db:
        rows, skips = asyncio.run(_status(db.url))
    typer.echo(f"{'name':<20} {'checkpoint':>10} {'head':>10} {'lag':>8} {'lag_s':>8}  error")
    for row in rows:
        where = "rebuild" if row.error_position is None else f"at {row.error_position}"
        if row.error_through is not None:  # the batch's write failed, at no event of its own
            where += f" (its batch, to {row.error_through})"
        error = f"{where}: {_one_line(row.last_error)}" if row.last_error else "-"
        typer.echo(
            f"{row.name:<20} {row.checkpoint:>10} {row.head:>10} {row.lag_events:>8} "
            f"{row.lag_seconds:>8.1f}  {error}"
        )
    for skip in skips:
        since = skip.skipped_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        typer.echo(
            f"{skip.name} skips {skip.position} since {since}: {skip.reason} "
            f"(it failed with {_one_line(skip.error) if skip.error else 'no recorded error'})"
        )


async def _status(url: URL | str) -> tuple[list[ProjectionStatus], list[Skip]]:
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            return await fetch_status(conn, every_projection()), await fetch_skips(conn)
    finally:
        await engine.dispose()


def _finite(value: float) -> float:
    if not math.isfinite(value):  # nan passes every range check, and waits for ever
        raise typer.BadParameter("must be a finite number of seconds")
    return value


def projections_rebuild(
    name: Annotated[str, typer.Argument(metavar="NAME", help="the projection to rebuild")],
    timeout_s: Annotated[
        float,
        typer.Option(
            min=0,
            metavar="SECONDS",
            help="how long to wait for a running leader",
            callback=_finite,
        ),
    ] = 600,
) -> None:
    """Rebuild a read model from position 0; readers see the old one until it is done."""
    settings = load_settings()
    with database(settings) as db:
        require_head(db.url, "run `causeway migrate`")  # else an error the rebuild's, exit 1
        runner = create_runner(settings, db.url)
        try:
            projection = runner.projection(name)
        except AppError as exc:
            fail(exc.detail)
        count = asyncio.run(_rebuild(runner, projection, timeout_s))
    typer.echo(f"rebuilt {name} from {count} events" if count >= 0 else f"rebuilt {name}")


async def _rebuild(runner: ProjectionRunner, projection: Projection, timeout_s: float) -> int:
    """Rebuild here if no runner leads the projection; else ask the leader and wait. An
    event the rebuild fails on is recorded as a leader records it (so ``skip`` can pass
    over it), and ends the command with one line."""
    try:
        async with runner.leadership(projection) as lead:
            if lead is not None:
                try:
                    return await runner.rebuild(projection)
                except ProjectionFailed as failed:
                    await runner.record_failure(projection, failed)
                    fail(_failed_at(projection.name, failed.position, str(failed)), 1)
                except (DBAPIError, psycopg.Error) as exc:
                    if is_connection_lost(exc):
                        raise
                    cause = exc.orig if isinstance(exc, DBAPIError) else exc
                    fail(_failed_at(projection.name, None, str(cause)), 1)
        failures = (await runner.status(projection)).failures
        await runner.request_rebuild(projection)
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            now = await runner.status(projection)
            # The request is gone: done, or withdrawn as the leader recorded the rebuild's
            # failure (one more failure). A rebuild that went through sets the count to 0,
            # so with failures before it (a stuck leader's retries, counted while the
            # request waited too) a count above them is the rebuild's. From none, one is
            # the rebuild's unless it lies past the checkpoint: the projection stopped
            # there after a rebuild that went through.
            if not now.rebuild_requested:
                rebuild_failed = now.failures > failures and (
                    failures > 0
                    or now.error_position is None
                    or now.error_position <= now.checkpoint
                )
                if rebuild_failed and now.last_error is not None:
                    fail(_failed_at(projection.name, now.error_position, now.last_error), 1)
                return -1
            if asyncio.get_running_loop().time() > deadline:
                fail(f"the leader did not rebuild {projection.name} within {timeout_s:.0f} s", 1)
            await asyncio.sleep(0.2)
    finally:
        await runner.dispose()


def _one_line(text: str) -> str:
    """An error of several lines (PostgreSQL's ``CONTEXT:``, say) on one row of a table."""
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


def _failed_at(name: str, position: int | None, error: str) -> str:
    first = error.strip().splitlines()[0] if error.strip() else "an error"
    if position is None:  # at no event: one of the rebuild's own statements
        return f"rebuilding {name} failed ({first}); the read model is as it was"
    return (
        f"rebuilding {name} failed at position {position} ({first}); the read model is as "
        f"it was. `causeway projections skip {name} {position} --reason ...` passes over "
        "that event, then rebuild again"
    )


def _position_argument(text: str) -> int:
    position = parse_position(text)
    if position is None or position == 0:
        fail(f"a position is a whole number from 1 up; got {text[:40]!r}")
    return position


def projections_skip(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="the projection that is stopped, failing")
    ],
    position: Annotated[
        str, typer.Argument(metavar="POSITION", help="the position it is stopped at")
    ],
    reason: Annotated[
        str,
        typer.Option(metavar="TEXT", help="why it may pass over the event (kept)", callback=utf8),
    ],
) -> None:
    """Let a projection pass over the event it keeps failing on, now and in every rebuild.
    Its read model will not reflect that event: the reason and the error are kept."""
    at = _position_argument(position)
    settings = load_settings()
    with database(settings) as db:
        runner = create_runner(settings, db.url)
        try:
            error = asyncio.run(_on_projection(runner, name, lambda p: runner.skip(p, at, reason)))
        except AppError as exc:
            fail(exc.detail)
    typer.echo(f"{name} skips position {at} ({error}); its leader passes it at its next retry")


def projections_unskip(
    name: Annotated[str, typer.Argument(metavar="NAME", help="the projection")],
    position: Annotated[str, typer.Argument(metavar="POSITION", help="a position it skips")],
) -> None:
    """Take a skip back: the next rebuild of the projection applies the event again."""
    at = _position_argument(position)
    settings = load_settings()
    with database(settings) as db:
        runner = create_runner(settings, db.url)
        try:
            asyncio.run(_on_projection(runner, name, lambda p: runner.unskip(p, at)))
        except AppError as exc:
            fail(exc.detail)
    typer.echo(
        f"{name} no longer skips position {at}; `causeway projections rebuild {name}` applies it"
    )


async def _on_projection(
    runner: ProjectionRunner, name: str, act: Callable[[Projection], Awaitable[T]]
) -> T:
    """``act`` on the projection called ``name``, then the runner disposed of."""
    try:
        return await act(runner.projection(name))
    finally:
        await runner.dispose()
