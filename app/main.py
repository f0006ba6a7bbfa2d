"""The composition root of the HTTP service: ``create_app(settings, database_url=...)``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlalchemy import URL

from app.api import events, health, problems, replay
from app.api.deps import require
from app.db.engine import create_engine
from app.db.schema import head_revision
from app.settings import Settings
from app.store.keys import Scope
from ingest.appender import Appender
from ingest.limits import Limits
from ingest.router import create_router as create_ingest_router


def limits_from(settings: Settings) -> Limits:
    return Limits(
        max_attributes_bytes=settings.max_attributes_bytes,
        max_event_data_bytes=settings.max_event_data_bytes,
        max_request_bytes=settings.max_request_bytes,
        max_batch_events=settings.max_batch_events,
    )


def create_app(
    settings: Settings,
    *,
    database_url: str | URL,
    on_shutdown: Callable[[], None] | None = None,
) -> FastAPI:
    """The service on ``database_url``; ``on_shutdown`` runs after the engine is closed."""
    engine = create_engine(
        database_url,
        pool_size=settings.db_pool_size,
        statement_timeout_ms=settings.statement_timeout_ms,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await engine.dispose()
        if on_shutdown is not None:
            on_shutdown()

    app = FastAPI(
        title="Causeway",
        summary="An append-only, event-sourced lineage store for AI systems",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.schema_head = head_revision()
    problems.install(app)
    app.include_router(
        create_ingest_router(Appender(engine), limits_from(settings), require(Scope.INGEST))
    )
    app.include_router(events.router)
    app.include_router(replay.router)
    app.include_router(health.router)
    return app
