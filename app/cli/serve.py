"""``causeway serve`` and ``causeway migrate``: the service under uvicorn, on the
database at the Alembic head."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import Annotated

import typer
import uvicorn
from sqlalchemy import URL

from app.cli.keys import create_key
from app.cli.runtime import (
    ADMIN_KEY_FILE,
    database,
    fail,
    load_settings,
    require_head,
    url_text,
)
from app.db.schema import head_revision, upgrade_to_head
from app.settings import Settings
from app.store.keys import Scope


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
            require_head(url, "run `causeway migrate` or pass --migrate")
        if embedded:
            _bootstrap_admin_key(settings, url)
        # The server builds the app from the environment (in each worker process, when
        # there are several); this process keeps the embedded PostgreSQL until the
        # server has stopped.
        os.environ["CAUSEWAY_DATABASE_URL"] = url_text(url)
        try:
            run_server(settings, bind_host, bind_port, workers or settings.workers)
        finally:
            db.close()


def run_server(settings: Settings, host: str, port: int, workers: int) -> None:
    """uvicorn serving the app over HTTP/1.1 through its public API (``uvicorn.run``):
    httptools parses, no WebSocket is spoken (the GraphQL schema has nothing to subscribe
    to). uvicorn has no cap on the request head and no head timeout: put a proxy in front
    (docs/deployment.md). The body's and the answer's timeouts are the app's
    (``app.web.timeouts``)."""
    uvicorn.run(
        "app.main:create_app_from_environment",
        factory=True,
        host=host,
        port=port,
        workers=workers if workers > 1 else None,
        http="httptools",
        ws="none",
        log_level="info",
        access_log=settings.access_log,
    )


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


def _bootstrap_admin_key(settings: Settings, url: URL | str) -> None:
    """On the embedded server's first start, make an admin key for tenant ``default``."""
    path = settings.data_dir / ADMIN_KEY_FILE
    if path.exists():
        typer.echo(f"admin key for tenant 'default' is in {path}", err=True)
        return
    issued = asyncio.run(create_key(url, "default", frozenset({Scope.ADMIN}), "bootstrap"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(issued + "\n")
    os.chmod(path, 0o600)
    typer.echo(f"created an admin key for tenant 'default' (kept in {path}):\n{issued}", err=True)


def migrate() -> None:
    """Migrate the database to the newest schema (Alembic head)."""
    settings = load_settings()
    with database(settings) as db:
        upgrade_to_head(db.url)
        typer.echo(f"schema at revision {head_revision()}")
