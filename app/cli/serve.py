"""``causeway serve`` and ``causeway migrate``: the service under uvicorn, on the
database at the Alembic head.

``serve``'s first lines say where the service answers, the admin key and where the data
lives; the embedded PostgreSQL's start-up and the migrations go to its log file. The
address also goes to ``<data_dir>/address`` (removed at exit), where ``causeway demo``
finds it with the admin key.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
import uvicorn
from sqlalchemy import URL, make_url

from app.cli.keys import create_key
from app.cli.runtime import (
    ADDRESS_FILE,
    ADMIN_KEY_FILE,
    SERVE_LOCK_FILE,
    Database,
    announce,
    database,
    fail,
    load_settings,
    migrate_to_head,
    require_head,
    sigterm_exits,
    url_text,
)
from app.db.schema import head_revision
from app.settings import Settings
from app.store.keys import Scope
from app.telemetry import logs


def serve(
    host: Annotated[
        str | None,
        typer.Option(
            metavar="ADDRESS",
            help="address to listen on, e.g. 0.0.0.0 for every interface",
            show_default="CAUSEWAY_HOST, else 127.0.0.1",
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            metavar="PORT",
            help="port to listen on, 0 for any free one",
            show_default="CAUSEWAY_PORT, else 8000",
        ),
    ] = None,
    migrate: Annotated[
        bool, typer.Option(help="migrate the database to head first (the embedded one always is)")
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar="COUNT",
            help="server processes",
            show_default="CAUSEWAY_WORKERS, else 1",
        ),
    ] = None,
) -> None:
    """Start the HTTP service (the embedded PostgreSQL unless CAUSEWAY_DATABASE_URL is set)."""
    settings = load_settings()
    bind_host = settings.host if host is None else host
    bind_port = settings.port if port is None else port
    _check_bind(bind_host, bind_port)  # before a database is started for nothing
    logs.configure(settings.log_format)
    with _one_serve_per_data_dir(settings), database(settings) as db:
        url = db.url
        if db.embedded is not None or migrate:
            with _migrations_logged_to(db):
                migrate_to_head(url)
        else:
            require_head(url, "run `causeway migrate` or pass --migrate")
        key_line = _bootstrap_admin_key(settings, url) if db.embedded is not None else None
        address_file = _announce(settings, db, bind_host, bind_port, key_line)
        # The server builds the app from the environment (in each worker process, when
        # there are several); this process keeps the embedded PostgreSQL until the
        # server has stopped.
        os.environ["CAUSEWAY_DATABASE_URL"] = url_text(url)
        try:
            with sigterm_exits():
                run_server(settings, bind_host, bind_port, workers or settings.workers)
        finally:
            if address_file is not None:
                _unlink_own(address_file, _address(bind_host, bind_port))
            db.close()


@contextlib.contextmanager
def _one_serve_per_data_dir(settings: Settings) -> Iterator[None]:
    """With the embedded PostgreSQL, one ``serve`` per data folder: a second one started
    on the same server and, stopping, removed the first one's address file. An exclusive
    lock on ``<data_dir>/serve.lock``, held for the life of the process (the system drops
    it when the process ends, however)."""
    if settings.database_url is not None:
        yield
        return
    path = settings.data_dir / SERVE_LOCK_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        holder = path.open("a+", encoding="utf-8")
    except OSError as exc:
        fail(f"cannot use {settings.data_dir}: {exc.strerror or exc}")
    with holder:
        try:
            fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder.seek(0)
            pid = holder.read().strip() or "?"
            fail(
                f"another causeway serve (pid {pid}) uses {settings.data_dir}: stop it, or "
                "give this one a CAUSEWAY_DATA_DIR of its own"
            )
        holder.seek(0)
        holder.truncate()
        holder.write(f"{os.getpid()}\n")
        holder.flush()
        yield


def _unlink_own(path: Path, address: str) -> None:
    """Remove the address file unless another service wrote its own address there."""
    with contextlib.suppress(OSError):
        if path.read_text(encoding="utf-8").strip() == address:
            path.unlink()


@contextlib.contextmanager
def _migrations_logged_to(db: Database) -> Iterator[None]:
    """Alembic's lines go to the embedded PostgreSQL's log (the console shows them for a
    database of one's own, where an operator asked for ``--migrate``)."""
    if db.embedded is None:
        yield
        return
    alembic_log = logging.getLogger("alembic")
    handler = logging.FileHandler(db.embedded.log_path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    alembic_log.addHandler(handler)
    alembic_log.propagate = False
    try:
        yield
    finally:
        alembic_log.removeHandler(handler)
        alembic_log.propagate = True
        handler.close()


def _announce(
    settings: Settings, db: Database, host: str, port: int, key_line: str | None
) -> Path | None:
    """The first lines on the console: the address, the key, where the data lives. The
    address is kept in ``<data_dir>/address`` for ``causeway demo`` (not when the port is
    0: only the server knows which one it got)."""
    address = _address(host, port)
    where = (
        f"{address}  (the explorer at {address}/ui/, GraphiQL at {address}/graphql)"
        if port
        else f"{host}, a free port"
    )
    announce(settings, f"Causeway on {where}")
    if key_line is not None:
        announce(settings, key_line)
    if db.embedded is not None:
        announce(
            settings,
            f"data: {settings.data_dir / 'pg'} (embedded PostgreSQL; its log: "
            f"{settings.data_dir / db.embedded.log_path.name})",
        )
    else:
        shown = make_url(url_text(db.url)).render_as_string(hide_password=True)
        announce(settings, f"data: {shown}")
    path = settings.data_dir / ADDRESS_FILE
    with contextlib.suppress(OSError):  # a data folder it cannot write is no reason to stop
        if not port:
            path.unlink(missing_ok=True)
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(address + "\n")
        return path
    return None


def _address(host: str, port: int) -> str:
    """Where a client on this machine reaches ``host:port`` (a wildcard: the loopback)."""
    reach = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # noqa: S104  # a name, not a bind
    return f"http://[{reach}]:{port}" if ":" in reach else f"http://{reach}:{port}"


def run_server(settings: Settings, host: str, port: int, workers: int) -> None:
    """uvicorn serving the app over HTTP/1.1 through its public API (``uvicorn.run``):
    httptools parses, no WebSocket is spoken (the GraphQL schema has nothing to subscribe
    to). uvicorn has no cap on the request head and no head timeout: put a proxy in front
    (docs/deployment.md). The body's and the answer's timeouts are the app's
    (``app.web.timeouts``)."""
    with _shared_metrics(workers):
        uvicorn.run(
            "app.main:create_app_from_environment",
            factory=True,
            host=host,
            port=port,
            workers=workers if workers > 1 else None,
            http="httptools",
            ws="none",
            log_level="info",
            # Each worker process configures its logging with this (uvicorn's and ours).
            log_config=logs.logging_config(settings.log_format),
            access_log=settings.access_log,
            # What still runs (an SSE watch, a long replay) is cut this long after SIGTERM:
            # an open watch waited for its client to leave, and the process never ended.
            timeout_graceful_shutdown=settings.shutdown_timeout_s,
        )


@contextlib.contextmanager
def _shared_metrics(workers: int) -> Iterator[None]:
    """With several workers, an empty directory of their own for prometheus-client's
    multiprocess mode, named in ``PROMETHEUS_MULTIPROC_DIR`` before any worker starts (a
    worker imports prometheus-client after), and removed once they are all gone: one
    scrape of any worker then shows every worker's counts (``app.telemetry.metrics``)."""
    if workers <= 1:
        yield
        return
    folder = tempfile.mkdtemp(prefix="causeway-metrics-")
    previous = os.environ.get(_MULTIPROC)
    os.environ[_MULTIPROC] = folder
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(_MULTIPROC, None)
        else:
            os.environ[_MULTIPROC] = previous
        shutil.rmtree(folder, ignore_errors=True)


_MULTIPROC = "PROMETHEUS_MULTIPROC_DIR"


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


def _bootstrap_admin_key(settings: Settings, url: URL | str) -> str:
    """On the embedded server's first start, make an admin key for tenant ``default``;
    the line that says where it is (and, the first time, what it is)."""
    path = settings.data_dir / ADMIN_KEY_FILE
    if path.exists():
        return f"admin key for tenant 'default': in {path}"
    issued = asyncio.run(create_key(url, "default", frozenset({Scope.ADMIN}), "bootstrap"))
    path.parent.mkdir(parents=True, exist_ok=True)
    # Made private as it is created: written first and narrowed after, any local user
    # could open it in between and keep the key.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(issued + "\n")
    os.chmod(path, 0o600)  # a file left from before, made with a wider mode
    return f"admin key for tenant 'default': {issued} (kept in {path})"


def migrate() -> None:
    """Migrate the database to the newest schema (Alembic head)."""
    settings = load_settings()
    with database(settings) as db:
        migrate_to_head(db.url)
        typer.echo(f"schema at revision {head_revision()}")
