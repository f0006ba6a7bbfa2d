"""HTTP fixtures: the ASGI app on a fresh database, a client, and keys per tenant."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import httpx2
import pytest
from fastapi import FastAPI
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import create_engine
from app.main import create_app, dispose
from app.settings import Settings
from app.store.keys import KeyStore, parse_scopes
from app.telemetry import tracing
from tests.integration.events import JSON, registration

MakeKey = Callable[..., Awaitable[str]]


@pytest.fixture
def settings() -> Settings:
    return Settings(_env_file=None)


@pytest.fixture
async def engine(database_url: URL) -> AsyncIterator[AsyncEngine]:
    # The owner's, as an operator's: tests make tables and change the database with it.
    # The service's own engines run as causeway_system (tests/integration/app/db).
    engine = create_engine(database_url, pool_size=2, role=None)
    yield engine
    await engine.dispose()


@pytest.fixture
async def app(settings: Settings, database_url: URL) -> AsyncIterator[FastAPI]:
    app = create_app(settings, database_url=database_url)
    yield app
    await dispose(app)


@pytest.fixture
async def make_key(engine: AsyncEngine) -> MakeKey:
    async def make(tenant: str = "acme", scopes: str = "ingest,read") -> str:
        async with engine.begin() as conn:
            issued = await KeyStore(conn).create(tenant, parse_scopes(scopes))
        return issued.key

    return make


async def catch_up(app: FastAPI) -> None:
    """What ``causeway serve`` does in the background: every projection follows the log up
    to its head (the dispatcher makes tasks, the registry and deployments read models)."""
    runner = app.state.runner
    for projection in runner.projections:
        await runner.catch_up(projection)


def asgi_client(app: FastAPI, key: str) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app),
        base_url="http://causeway",
        headers={"Authorization": f"Bearer {key}"},
    )


@pytest.fixture
async def client(app: FastAPI, make_key: MakeKey) -> AsyncIterator[httpx2.AsyncClient]:
    """A client of tenant ``acme`` with the ingest and read scopes."""
    async with asgi_client(app, await make_key("acme", "ingest,read")) as client:
        yield client


@pytest.fixture
async def admin(app: FastAPI, make_key: MakeKey) -> AsyncIterator[httpx2.AsyncClient]:
    """A client of tenant ``acme`` with the admin scope (registers models)."""
    async with asgi_client(app, await make_key("acme", "admin")) as client:
        yield client


@pytest.fixture
def register(admin: httpx2.AsyncClient) -> Callable[..., Awaitable[None]]:
    """Register model versions in tenant ``acme``: ``await register("m", "1", "2")``."""

    async def register_versions(name: str, *versions: str) -> None:
        for version in versions:
            response = await admin.post(
                f"/models/{name}/versions", content=registration(version), headers=JSON
            )
            assert response.status_code in (200, 201), response.text

    return register_versions


_SPANS = InMemorySpanExporter()


@pytest.fixture(scope="session")
def _tracing_installed() -> InMemorySpanExporter:
    """The in-memory exporter, installed once per session (the global provider can be set
    only once per process); tracing stays off outside the tests that ask for ``spans``."""
    tracing.install_for_tests(_SPANS)
    tracing.turn_off()
    return _SPANS


@pytest.fixture
def spans(_tracing_installed: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    """Tracing on for this test, every finished span in the exporter it yields."""
    _tracing_installed.clear()
    tracing.turn_on()
    try:
        yield _tracing_installed
    finally:
        tracing.turn_off()
        _tracing_installed.clear()
