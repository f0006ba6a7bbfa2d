"""``causeway keys``: create and revoke API keys."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from sqlalchemy import URL

from app.cli.runtime import (
    database,
    fail,
    load_settings,
    once,
    utf8,
)
from app.db.engine import create_engine
from app.errors import AppError
from app.store.keys import KeyStore, Scope, parse_scopes


def keys_create(
    # Lists, to refuse one given twice: click keeps the last, and `--scopes read --scopes
    # admin` made an admin key with exit 0.
    tenant: Annotated[
        list[str], typer.Option(metavar="TENANT", help="the tenant the key belongs to")
    ],
    scopes: Annotated[
        list[str],
        typer.Option(metavar="SCOPES", help="comma-separated: ingest, read, worker, admin"),
    ],
    description: Annotated[
        list[str] | None,
        typer.Option(
            metavar="TEXT", help="what the key is for", show_default="none", callback=utf8
        ),
    ] = None,
) -> None:
    """Create a key and print it once; only its hash is stored."""
    settings = load_settings()
    one = once(tenant=tenant, scopes=scopes, description=description)
    try:
        wanted = parse_scopes(one["scopes"])
    except AppError as exc:
        fail(exc.detail)
    with database(settings) as db:
        try:
            key = asyncio.run(create_key(db.url, one["tenant"], wanted, one["description"]))
        except AppError as exc:
            fail(exc.detail)
    typer.echo(key)


def keys_revoke(
    key_id: Annotated[
        str, typer.Argument(metavar="KEY_ID", help="the id in cw_<id>_...", callback=utf8)
    ],
) -> None:
    """Revoke a key: requests with it get 401 within CAUSEWAY_KEY_CACHE_TTL_S (each
    server trusts a checked key that long), and the replays, deployment watches and
    long-polls it opened end."""
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


async def create_key(
    url: URL | str, tenant: str, scopes: frozenset[Scope], description: str | None
) -> str:
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.begin() as conn:
            return (await KeyStore(conn).create(tenant, scopes, description)).key
    finally:
        await engine.dispose()
