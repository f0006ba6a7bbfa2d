"""The ``causeway`` command: serve, migrate, verify, replay and keys.

Bad input prints ``error: <detail>`` on stderr and exits 2; a failed check (``verify``)
exits 1. With no ``CAUSEWAY_DATABASE_URL`` every command uses the embedded PostgreSQL
under ``CAUSEWAY_DATA_DIR``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import IO, Annotated, Any, NoReturn, TypeVar

import typer
from granian import Granian
from granian.constants import HTTPModes, Interfaces
from granian.http import HTTP1Settings
from granian.log import LogLevels
from pydantic import ValidationError
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from sqlalchemy import URL

from app.api.replay import replay_filter
from app.db.embedded import EmbeddedPostgres
from app.db.engine import create_engine
from app.db.schema import current_revision, head_revision, upgrade_to_head
from app.errors import AppError
from app.main import create_runner, every_projection
from app.projections.base import Projection
from app.projections.runner import ProjectionFailed, ProjectionRunner
from app.projections.status import ProjectionStatus, Skip, fetch_skips, fetch_status
from app.settings import Settings
from app.store.failures import connection_problem
from app.store.keys import KeyStore, Scope, parse_scopes
from app.store.reads import EventReader
from app.store.records import MAX_POSITION, EventFilter, parse_position
from app.store.verify import ChainReport, verify_chain
from evs_bridge.cli import cli as evs_cli
from evs_bridge.cli import run_commands

T = TypeVar("T")

cli = typer.Typer(
    help="Causeway: an append-only lineage store for AI systems.", no_args_is_help=True
)
keys_cli = typer.Typer(help="Create and revoke API keys.", no_args_is_help=True)
cli.add_typer(keys_cli, name="keys")
projections_cli = typer.Typer(help="Inspect and rebuild read models.", no_args_is_help=True)
cli.add_typer(projections_cli, name="projections")
cli.add_typer(evs_cli, name="evs")  # the edge bridge, also `python -m evs_bridge`
_err = Console(stderr=True)
ADMIN_KEY_FILE = "admin.key"


def fail(detail: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {detail}", err=True)
    raise typer.Exit(code)


def _utf8(value: str | list[str] | None) -> str | list[str] | None:
    """A text option or argument that goes to the database (or each of a repeated one):
    bytes that are not UTF-8 (which Python keeps as lone surrogates) are a usage error
    here, not a traceback from the driver later."""
    for text in [value] if isinstance(value, str) else value or []:
        try:
            text.encode()
        except UnicodeEncodeError:
            raise typer.BadParameter("is not valid UTF-8 text") from None
    return value


def load_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        fail(f"setting CAUSEWAY_{str(first['loc'][0]).upper()}: {first['msg']}")
    except UnicodeDecodeError as exc:  # the .env file in the working directory
        fail(f".env is not UTF-8: {exc.reason} at byte {exc.start}")


@dataclass(frozen=True, slots=True)
class Database:
    url: URL | str
    embedded: EmbeddedPostgres | None

    def close(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()


@contextmanager
def database(settings: Settings) -> Iterator[Database]:
    """The configured database, or the embedded server started for the block."""
    if settings.database_url is not None:
        yield Database(settings.database_url, None)
        return
    embedded = EmbeddedPostgres(settings.data_dir)
    try:
        url = embedded.start()
    except Exception as exc:  # pgserver raises assorted errors; report any of them
        fail(f"could not start the embedded PostgreSQL in {settings.data_dir}: {exc}", 1)
    db = Database(url, embedded)
    try:
        yield db
    finally:
        db.close()


def _require_head(url: URL | str, advice: str) -> None:
    """Exit 2 unless the database answers and its schema is at the Alembic head (a
    database it cannot reach is reported by ``main``, in one line too)."""
    revision, head = current_revision(url), head_revision()
    if revision != head:
        fail(f"the database schema is at revision {revision}, not {head}; {advice}")


@cli.command()
def serve(
    host: Annotated[str | None, typer.Option(help="bind address [CAUSEWAY_HOST]")] = None,
    port: Annotated[
        int | None, typer.Option(min=0, max=65535, help="port, 0 for any free one [CAUSEWAY_PORT]")
    ] = None,
    migrate: Annotated[bool, typer.Option(help="migrate the database to head first")] = False,
    workers: Annotated[
        int | None, typer.Option(min=1, help="server processes [CAUSEWAY_WORKERS]")
    ] = None,
) -> None:
    """Start the HTTP service (the embedded PostgreSQL unless CAUSEWAY_DATABASE_URL is set)."""
    settings = load_settings()
    bind_host = settings.host if host is None else host
    bind_port = settings.port if port is None else port
    _check_bind(bind_host, bind_port)  # before a database is started for nothing
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    with database(settings) as db:
        url, embedded = db.url, db.embedded is not None
        if embedded or migrate:
            upgrade_to_head(url)
        else:
            _require_head(url, "run `causeway migrate` or pass --migrate")
        if embedded:
            _bootstrap_admin_key(settings, url)
        # Granian runs the app in worker processes, each building its own app (and
        # engines) from the environment; this process keeps the embedded PostgreSQL
        # until they have stopped.
        os.environ["CAUSEWAY_DATABASE_URL"] = _url_text(url)
        try:
            run_server(settings, bind_host, bind_port, workers or settings.workers)
        finally:
            db.close()


def run_server(settings: Settings, host: str, port: int, workers: int) -> None:
    """Granian serving the app over HTTP/1.1, with its guards on the request head: a
    head over ``max_head_bytes`` is refused (431), one not whole within
    ``head_timeout_s`` ends the connection, which also ends a keep-alive connection idle
    that long. The body's and the answer's timeouts are the app's (``app.web.timeouts``)."""
    Granian(
        "app.main:create_app_from_environment",
        factory=True,
        interface=Interfaces.ASGI,
        address=host,
        port=port,
        workers=workers,
        http=HTTPModes.http1,
        websockets=False,  # the GraphQL schema has nothing to subscribe to
        http1_settings=HTTP1Settings(
            header_read_timeout=round(settings.head_timeout_s * 1000),
            max_buffer_size=settings.max_head_bytes,
        ),
        log_level=LogLevels.info,
        log_access=settings.access_log,
    ).serve()


def _check_bind(host: str, port: int) -> None:
    """Exit 2 with one line when ``host:port`` cannot be listened on (taken, no such host,
    not this machine's address): the server would log it in many lines."""
    if not host:
        fail("--host must name an address or a host, e.g. 127.0.0.1 or 0.0.0.0")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
            probe.bind(address)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")


def _url_text(url: URL | str) -> str:
    return url if isinstance(url, str) else url.render_as_string(hide_password=False)


def _bootstrap_admin_key(settings: Settings, url: URL | str) -> None:
    """On the embedded server's first start, make an admin key for tenant ``default``."""
    path = settings.data_dir / ADMIN_KEY_FILE
    if path.exists():
        typer.echo(f"admin key for tenant 'default' is in {path}", err=True)
        return
    issued = asyncio.run(_create_key(url, "default", frozenset({Scope.ADMIN}), "bootstrap"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(issued + "\n")
    os.chmod(path, 0o600)
    typer.echo(f"created an admin key for tenant 'default' (kept in {path}):\n{issued}", err=True)


async def _create_key(
    url: URL | str, tenant: str, scopes: frozenset[Scope], description: str | None
) -> str:
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.begin() as conn:
            return (await KeyStore(conn).create(tenant, scopes, description)).key
    finally:
        await engine.dispose()


@cli.command()
def migrate() -> None:
    """Migrate the database to the newest schema (Alembic head)."""
    settings = load_settings()
    with database(settings) as db:
        upgrade_to_head(db.url)
        typer.echo(f"schema at revision {head_revision()}")


@cli.command()
def verify(
    anchor: Annotated[
        list[str] | None,
        typer.Option(
            metavar="POSITION:HASH",
            help="a hash the chain must still carry at that position, kept outside the "
            "database: the '<events>:<head>' of an earlier verify (repeatable)",
        ),
    ] = None,
) -> None:
    """Re-check the whole hash chain; exit 1 at the first event that does not match."""
    settings = load_settings()
    anchors: dict[int, bytes] = {}
    for position, digest in (_parse_anchor(text) for text in anchor or []):
        if anchors.setdefault(position, digest) != digest:
            fail(f"--anchor gives two hashes for position {position}")
    with database(settings) as db:
        report = asyncio.run(_verify(db.url, anchors))
    if not report.is_intact:
        where = f"position {report.bad_position}" if report.bad_position else "the log head"
        fail(f"hash chain broken at {where}: {report.reason}", 1)
    typer.echo(f"ok: {report.count} events, head {report.head_hash.hex()}")
    # What to keep outside the database, to pass later as --anchor.
    typer.echo(f"anchor: {report.count}:{report.head_hash.hex()}")


_ANCHOR = re.compile(r"([0-9]+):([0-9a-fA-F]{64})")


def _parse_anchor(text: str) -> tuple[int, bytes]:
    found = _ANCHOR.fullmatch(text)
    position = None if found is None else parse_position(found[1])
    if found is None or not position:
        fail(f"--anchor takes POSITION:HASH (a position and 64 hex digits), not {text!r}")
    return position, bytes.fromhex(found[2])


async def _verify(url: URL | str, anchors: dict[int, bytes]) -> ChainReport:
    engine = create_engine(url, pool_size=1, statement_timeout_ms=0)
    try:
        async with engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="REPEATABLE READ")
            async with conn.begin():
                return await verify_chain(conn, anchors=anchors)
    finally:
        await engine.dispose()


@cli.command()
def replay(
    out: Annotated[Path, typer.Option("--out", help="file to write ('-' for stdout)")],
    tenant: Annotated[str, typer.Option(help="tenant to replay", callback=_utf8)] = "default",
    after: Annotated[
        int, typer.Option(min=0, max=MAX_POSITION, help="resume after this position")
    ] = 0,
    types: Annotated[
        list[str] | None,
        typer.Option(help="event types, comma-separated; may be repeated", callback=_utf8),
    ] = None,
    stream: Annotated[str | None, typer.Option(callback=_utf8)] = None,
    source: Annotated[str | None, typer.Option(callback=_utf8)] = None,
    correlationid: Annotated[str | None, typer.Option(callback=_utf8)] = None,
    modelname: Annotated[str | None, typer.Option(callback=_utf8)] = None,
    modelversion: Annotated[str | None, typer.Option(callback=_utf8)] = None,
    since: Annotated[str | None, typer.Option(help="event time >= (RFC 3339)")] = None,
    until: Annotated[str | None, typer.Option(help="event time < (RFC 3339)")] = None,
    limit: Annotated[int | None, typer.Option(min=1, max=MAX_POSITION)] = None,
    format: Annotated[
        str, typer.Option("--format", help="ndjson (a CloudEvent a line) or parquet")
    ] = "ndjson",
) -> None:
    """Write matching events as NDJSON or Parquet, in position order, with progress on
    stderr."""
    settings = load_settings()
    if format not in ("ndjson", "parquet"):
        fail(f"--format must be ndjson or parquet, not {format!r}")
    try:
        selection = replay_filter(
            after,
            ",".join(types) if types else None,
            stream,
            source,
            correlationid,
            modelname,
            modelversion,
            since,
            until,
            limit,
        )
    except AppError as exc:
        fail(exc.detail)
    with database(settings) as db:
        count = asyncio.run(
            _replay(db.url, tenant, selection, out, settings.replay_fetch_rows, format)
        )
    typer.echo(f"wrote {count} events to {out}", err=True)


async def _replay(
    url: URL | str, tenant: str, selection: EventFilter, out: Path, fetch_rows: int, form: str
) -> int:
    engine = create_engine(url, pool_size=1, statement_timeout_ms=0)
    count = 0
    try:
        async with engine.connect() as conn:
            sink, partial = _open_for_writing(out)
            try:
                count = await _write_replay(conn, sink, tenant, selection, fetch_rows, form)
                _finish(sink)
            except BaseException:
                if sink is not sys.stdout.buffer:
                    with contextlib.suppress(OSError):  # what is left unwritten goes too
                        sink.close()
                if partial is not None:
                    partial.unlink(missing_ok=True)
                raise
            if partial is not None:
                partial.replace(out)
    finally:
        await engine.dispose()
    return count


def _open_for_writing(out: Path) -> tuple[IO[bytes], Path | None]:
    """Where the replay goes, and the file to rename onto ``out`` once it is complete.
    A regular file named as itself (or a new name) is written beside itself, with its
    permissions, and renamed at the end, so a replay that fails half way leaves an
    earlier export as it was. Anything else is written through, as it is: ``-``, a
    symlink (``/dev/stdout`` and ``/dev/fd/N`` are links, to what the shell redirected,
    which may be a file being appended to), a pipe, a device."""
    if str(out) == "-":
        return sys.stdout.buffer, None
    try:
        found = os.lstat(out)
    except FileNotFoundError:
        found = None
    except OSError as exc:
        fail(f"--out {out}: {exc.strerror or exc}")
    if out.is_dir():
        fail(f"--out {out}: is a directory")
    try:
        if found is not None and not stat.S_ISREG(found.st_mode):
            return out.open("wb"), None
        partial = out.with_name(f".{out.name}.partial")
        sink = partial.open("wb")
        if found is not None:
            os.chmod(partial, stat.S_IMODE(found.st_mode))
        return sink, partial
    except OSError as exc:
        fail(f"--out {out}: {exc.strerror or exc}")


def _finish(sink: IO[bytes]) -> None:
    """Write out what the sink still buffers: a full disk may refuse that last part."""
    try:
        if sink is sys.stdout.buffer:
            sink.flush()
        else:
            sink.close()
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        fail(f"writing the replay: {exc.strerror or exc}", 1)


async def _write_replay(
    conn: Any, sink: IO[bytes], tenant: str, selection: EventFilter, fetch_rows: int, form: str
) -> int:
    count = 0
    try:
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.completed} events"),
            TimeElapsedColumn(),
            console=_err,
            transient=True,
            disable=not _err.is_terminal,  # else it ends with a blank line of its own
        ) as progress:
            task = progress.add_task("replay", total=None)
            reader = EventReader(conn)
            if form == "parquet":
                from app.store.parquet import parquet_file  # pyarrow: on first use

                async def rows() -> AsyncIterator[list[tuple[Any, ...]]]:
                    nonlocal count
                    async for chunk in reader.replay_rows(tenant, selection, fetch_rows=fetch_rows):
                        count += len(chunk)
                        progress.update(task, completed=count)
                        yield chunk

                async for piece in parquet_file(rows()):
                    sink.write(piece)
            else:
                async for lines in reader.replay(tenant, selection, fetch_rows=fetch_rows):
                    sink.write(lines.text.encode())
                    count += lines.count
                    progress.update(task, completed=count)
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        fail(f"writing the replay: {exc.strerror or exc}", 1)
    return count


@cli.command()
def project() -> None:
    """Run the projection runner alone (several may run: one leads each projection)."""
    settings = load_settings()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    with database(settings) as db:
        if db.embedded is not None:
            upgrade_to_head(db.url)  # as serve does: the embedded one is this command's own
        else:
            _require_head(db.url, "run `causeway migrate`")
        runner = create_runner(settings, db.url)
        typer.echo(f"following {', '.join(p.name for p in runner.projections)}", err=True)
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(runner.run())


@projections_cli.command("status")
def projections_status() -> None:
    """Each projection's checkpoint, the head, the lag in events and seconds, errors."""
    settings = load_settings()
    with database(settings) as db:
        rows, skips = asyncio.run(_status(db.url))
    typer.echo(f"{'name':<20} {'checkpoint':>10} {'head':>10} {'lag':>8} {'lag_s':>8}  error")
    for row in rows:
        error = f"at {row.error_position}: {_one_line(row.last_error)}" if row.last_error else "-"
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


@projections_cli.command("rebuild")
def projections_rebuild(
    name: Annotated[str, typer.Argument(help="the projection to rebuild")],
    timeout_s: Annotated[
        float, typer.Option(min=0, help="how long to wait for a running leader")
    ] = 600,
) -> None:
    """Rebuild a read model from position 0; readers see the old one until it is done."""
    settings = load_settings()
    with database(settings) as db:
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
        failures = (await runner.status(projection)).failures
        await runner.request_rebuild(projection)
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            now = await runner.status(projection)
            # A leader tries a requested rebuild before anything else, and withdraws one
            # that failed as it records the failure: one more failure is the rebuild's.
            if now.failures > failures and now.error_position is not None:
                fail(_failed_at(projection.name, now.error_position, now.last_error or ""), 1)
            if not now.rebuild_requested:
                return -1
            if asyncio.get_running_loop().time() > deadline:
                fail(f"the leader did not rebuild {projection.name} within {timeout_s:.0f} s", 1)
            await asyncio.sleep(0.2)
    finally:
        await runner.dispose()


def _one_line(text: str) -> str:
    """An error of several lines (PostgreSQL's ``CONTEXT:``, say) on one row of a table."""
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


def _failed_at(name: str, position: int, error: str) -> str:
    first = error.strip().splitlines()[0] if error.strip() else "an error"
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


@projections_cli.command("skip")
def projections_skip(
    name: Annotated[str, typer.Argument(help="the projection that is stopped, failing")],
    position: Annotated[str, typer.Argument(help="the position it is stopped at")],
    reason: Annotated[
        str, typer.Option(help="why it may pass over the event (kept)", callback=_utf8)
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


@projections_cli.command("unskip")
def projections_unskip(
    name: Annotated[str, typer.Argument(help="the projection")],
    position: Annotated[str, typer.Argument(help="a position it skips")],
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


@keys_cli.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option(help="the tenant the key belongs to")],
    scopes: Annotated[str, typer.Option(help="comma-separated: ingest, read, worker, admin")],
    description: Annotated[
        str | None, typer.Option(help="what the key is for", callback=_utf8)
    ] = None,
) -> None:
    """Create a key and print it once; only its hash is stored."""
    settings = load_settings()
    try:
        wanted = parse_scopes(scopes)
    except AppError as exc:
        fail(exc.detail)
    with database(settings) as db:
        try:
            key = asyncio.run(_create_key(db.url, tenant, wanted, description))
        except AppError as exc:
            fail(exc.detail)
    typer.echo(key)


@keys_cli.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="the id in cw_<id>_...", callback=_utf8)],
) -> None:
    """Revoke a key: requests with it get 401 from now on."""
    settings = load_settings()
    with database(settings) as db:
        try:
            asyncio.run(_revoke(db.url, key_id))
        except AppError as exc:
            fail(exc.detail)
    typer.echo(f"revoked {key_id}")


async def _revoke(url: URL | str, key_id: str) -> None:
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.begin() as conn:
            await KeyStore(conn).revoke(key_id)
    finally:
        await engine.dispose()


def main() -> None:
    """Run the CLI; a usage error, or a database the command cannot use (unreachable,
    refusing the login, not migrated), is one line on stderr and exit code 2."""
    try:
        run_commands(cli)
    except Exception as exc:
        detail = connection_problem(exc)
        if detail is None:
            raise
        typer.echo(f"error: {detail}", err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
