"""The composition root of the HTTP service: ``create_app(settings, database_url=...)``."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any
from urllib.parse import unquote_to_bytes

from fastapi import Depends, FastAPI, Security
from sqlalchemy import URL
from starlette.datastructures import QueryParams
from starlette.types import Receive, Scope, Send

from app.api import (
    deployments,
    events,
    health,
    model_registry,
    projections,
    replay,
)
from app.api.replay import ReplaySlots
from app.db.engine import Engine, create_engine, libpq_conninfo
from app.db.schema import head_revision
from app.errors import BadRequest, UnsupportedContentEncoding
from app.explorer import router as explorer
from app.graphql.router import GraphQLApp, create_graphql
from app.settings import Settings
from app.store.append.group_commit import Appender
from app.store.keys import Scope as KeyScope
from app.telemetry import metrics, tracing
from app.web import assets, problems
from app.web.auth import Authenticator
from app.web.bodies import CappedRequest, declared_too_large
from app.web.dependencies import (
    authorization_of,
    authorize,
    one_value_each,
    refuse_repeated,
    require,
)
from app.web.metrics import RequestTimer, keep_sampling, pools_in, scrape_of
from app.web.openapi import bearer, finish
from app.web.request_ids import with_request_id
from app.web.timeouts import Linger, Timeouts
from app.web.traced import traced
from app.wiring import (
    create_relay,
    create_runner,
    graphql_connections,
    graphql_limits_from,
    lease_policy_from,
    limits_from,
    read_router_from,
)
from ingest.binding import BATCH, parse_request
from ingest.openlineage.router import LineageIngest
from ingest.openlineage.router import create_router as create_lineage_router
from ingest.router import CLOUDEVENT_SCHEMA, Ingest
from ingest.router import create_router as create_ingest_router
from scheduler.autoscale import PidController
from scheduler.router import Principals
from scheduler.router import create_router as create_scheduler_router
from scheduler.rows.wakeups import TaskWakeups
from scheduler.service import SchedulerLoop, controller_from, timers_from

logger = logging.getLogger(__name__)


def create_app(
    settings: Settings,
    *,
    database_url: str | URL,
    on_shutdown: Callable[[], None] | None = None,
    tune_gc: bool = False,
) -> FastAPI:
    """The service on ``database_url``; ``on_shutdown`` runs after the engine is closed.
    ``tune_gc`` (for ``causeway serve``, not for tests) applies ``tune_garbage_collector``
    once the app has started."""
    engine = create_engine(
        database_url,
        pool_size=settings.db_pool_size,
        statement_timeout_ms=settings.statement_timeout_ms,
    )

    appender = Appender(engine)
    # The scheduler's decisions have an appender of their own, on connections of their own:
    # a command holds its task row (and its connection) until its decision is appended.
    decisions_engine = create_engine(
        database_url, pool_size=2, statement_timeout_ms=settings.statement_timeout_ms
    )
    decisions = Appender(decisions_engine, plan_ahead=False)
    # Long-polling leases wait for a wake-up on one listening connection of the process.
    wakeups = TaskWakeups(libpq_conninfo(database_url))
    walks, graphql_reads = graphql_connections(settings, database_url)
    read_router = read_router_from(settings, engine, walks, graphql_reads)
    runner = create_runner(settings, database_url)
    relay = create_relay(settings, database_url)
    controller = controller_from(settings)
    timers = timers_from(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tracing.configure()  # in each worker process, after any fork (OTEL_* variables)
        await walks.open()  # connects in the background; the first walk need not wait
        background = [asyncio.create_task(read_router.watch())]
        background.append(asyncio.create_task(keep_sampling(pools_in(app.state))))
        wakeups.start()
        if settings.run_projections:
            background.append(asyncio.create_task(runner.run()))
        if relay is not None:
            background.append(asyncio.create_task(relay.run()))
        if settings.run_scheduler:
            sweeper = SchedulerLoop(engine, controller, timers, decisions)
            background.append(asyncio.create_task(sweeper.run()))
        if tune_gc:
            tune_garbage_collector()
        yield
        await _stop(background, min(settings.shutdown_timeout_s, _BACKGROUND_STOP_S))
        await dispose(app)
        metrics.leave()
        if on_shutdown is not None:
            on_shutdown()

    app = Causeway(
        # /docs and /redoc are app.web.assets' routes: on files this server serves.
        docs_url=None,
        redoc_url=None,
        title="Causeway",
        summary="An append-only, event-sourced lineage store for AI systems",
        version="0.1.0",
        lifespan=lifespan,
        # Our own server span covers every path, the ones answered before FastAPI's router
        # included (app.web.traced): FastAPI's native telemetry would add a second one.
        telemetry={"tracing": False, "operation_spans": False, "metrics": False, "logs": False},
        dependencies=[Depends(one_value_each)],
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.replay_slots = ReplaySlots(settings.replay_max_streams)
    app.state.appender = appender
    app.state.runner = runner
    app.state.relay = relay
    app.state.scheduler_controller = controller
    app.state.decisions_engine = decisions_engine
    app.state.walks = walks
    app.state.graphql_reads = graphql_reads
    app.state.read_router = read_router
    app.state.decisions = decisions
    app.state.wakeups = wakeups
    app.state.authenticator = Authenticator(engine, ttl_s=settings.key_cache_ttl_s)
    app.state.schema_head = head_revision()
    problems.install(app)
    app.timeouts = RequestTimer(  # request latencies (app.web.metrics), then the timeouts
        Timeouts(
            app.answer,
            body_timeout_s=settings.body_timeout_s,
            send_timeout_s=settings.send_timeout_s,
            linger=Linger(max_bytes=settings.linger_bytes, max_s=settings.linger_s),
        )
    )
    _mount_routes(app, settings, controller)
    return app


def _mount_routes(app: Causeway, settings: Settings, controller: PidController) -> None:
    """Every router, in the order a request is matched against them."""
    appender: Appender = app.state.appender
    decisions: Appender = app.state.decisions
    engine: Engine = app.state.engine
    # A request is matched against the routes in this order. POST /events and POST
    # /graphql are answered before the router (``Causeway.answer``), so the scheduler's
    # workers (leases, completions) are its hot path: its routes go first, then ingest's.
    app.include_router(
        create_scheduler_router(
            engine,
            appender,
            decisions,
            settings.max_request_bytes,
            partial(parse_request, BATCH, [], limits=limits_from(settings)),
            lease_policy_from(settings),
            controller,
            scrape_of(app.state),
            Principals(
                admin=require(KeyScope.ADMIN),
                worker=require(KeyScope.WORKER),
                read=require(KeyScope.READ),
                metrics=require(KeyScope.READ, in_outage=True),
            ),
            app.state.wakeups,
        )
    )
    app.ingest = Ingest(appender, limits_from(settings))
    app.include_router(create_ingest_router(app.ingest, require(KeyScope.INGEST)))
    lineage = LineageIngest(engine, appender, limits_from(settings))
    app.include_router(create_lineage_router(lineage, require(KeyScope.INGEST)))
    graphql = create_graphql(
        app.state.read_router,
        app.state.runner,
        app.state.authenticator,
        graphql_limits_from(settings),
    )
    app.graphql = graphql.app
    app.include_router(graphql.router, prefix="/graphql", dependencies=[Security(bearer)])
    app.include_router(events.router)
    app.include_router(replay.router)
    app.include_router(health.router)
    app.include_router(model_registry.router)
    app.include_router(deployments.router)
    app.include_router(projections.router)
    app.include_router(assets.router)
    app.include_router(explorer.router)


class Causeway(FastAPI):
    """The service's ASGI app. Every HTTP request is read and answered under ``timeouts``
    (``app.web.timeouts``).

    ``POST /events`` at the root is answered here, before FastAPI's middleware stack and
    router: for a single event their layers (routing, dependency solving, the exception
    middleware, the response wrappers) cost more CPU than parsing and appending it
    (``bench/ingest.py`` (b), measured under Granian: 3.0x ``eventsourcing`` through the
    route, 4.6x here). It calls the same ``Ingest`` as the documented route
    (``ingest.router``), which answers under a path prefix, and its errors are the same
    problems. ``POST /graphql`` goes to Strawberry's ASGI face of the GraphQL view the same way.

    The body of every other POST, PUT, PATCH or DELETE is capped at ``max_request_bytes``
    here: FastAPI reads a route's body before it runs the route's dependencies, the key
    check among them, so without the cap anyone could make the service hold any body in
    memory."""

    ingest: Ingest
    graphql: GraphQLApp
    timeouts: RequestTimer  # around every HTTP request: its latency, then body and send timeouts

    def openapi(self) -> dict[str, Any]:
        """FastAPI's document, with the problems every operation answers (``app.web.openapi``)."""
        if self.openapi_schema is None:
            self.openapi_schema = finish(super().openapi(), CLOUDEVENT_SCHEMA)
        return self.openapi_schema

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        if tracing.on:  # a server span around the whole request (app.web.traced)
            await with_request_id(partial(traced, self.timeouts), scope, receive, send)
            return
        await with_request_id(self.timeouts, scope, receive, send)

    async def answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        """An HTTP request, under ``timeouts``."""
        path, method = scope["path"], scope["method"]
        undecodable = _undecodable(scope)
        if undecodable is not None:
            malformed = BadRequest(f"the {undecodable}'s percent-encoding does not decode as UTF-8")
            await problems.response_for(malformed, method, path)(scope, receive, send)
            return
        encoding = _header(scope["headers"], b"content-encoding").strip().lower()
        if encoding not in ("", "identity") and method not in _BODILESS and not _inflates(scope):
            coded = UnsupportedContentEncoding(f"Content-Encoding {encoding[:64]!r}: send identity")
            await problems.response_for(coded, method, path)(scope, receive, send)
            return
        if path == "/events" and method == "POST":
            await self._post_events(scope, receive, send)
            return
        if method in _BODILESS:
            # Their routes take no body. (Their streaming responses read on, to hear the
            # client leave, and would otherwise trip the cap on a body sent anyway.)
            await super().__call__(scope, receive, send)
            return
        max_bytes = self.ingest.limits.max_request_bytes
        refused = declared_too_large(_header(scope["headers"], b"content-length"), max_bytes)
        if refused is not None:
            await problems.response_for(refused, method, path)(scope, receive, send)
            return
        request = CappedRequest(receive, send, max_bytes)
        if path == "/graphql" and method == "POST":
            try:
                await self.graphql(scope, request.receive, request.send)
            except Exception as exc:  # no key, a cap: the view raises before it answers
                if request.started:  # answered already; FastAPI's own stack re-raises too
                    raise
                await problems.response_for(exc, method, path)(scope, receive, send)
        else:
            await super().__call__(scope, request.receive, request.send)

    async def _post_events(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = scope["headers"]
        try:
            # A body declared past the cap first, key or no key, as every other route
            # (``answer``) refuses it: under a path prefix this one was a 413, here a 401.
            declared = _header(headers, b"content-length")
            refused = declared_too_large(declared, self.ingest.limits.max_request_bytes)
            if refused is not None:
                raise refused
            if scope["query_string"]:  # as the routed path's one_value_each asks
                refuse_repeated(
                    [name for name, _ in QueryParams(scope["query_string"]).multi_items()]
                )
            principal = await authorize(
                self.state.authenticator, authorization_of(headers), KeyScope.INGEST
            )
            body = await self.ingest.read_body(receive, _header(headers, b"content-length"))
            status, answer, position = await self.ingest.answer(
                principal, _header(headers, b"content-type") or None, headers, body
            )
        except Exception as exc:
            await problems.response_for(exc, "POST", "/events")(scope, receive, send)
            return
        answer_headers = _json(answer)
        answer_headers.append((b"causeway-position", b"%d" % position))
        await send({"type": "http.response.start", "status": status, "headers": answer_headers})
        await send({"type": "http.response.body", "body": answer})


async def _stop(background: list[asyncio.Task[Any]], wait_s: float) -> None:
    """Cut the background tasks together, and wait for them ``wait_s`` at most: a task cut
    in a query on a database that stopped answering waits out the driver's cancel (10 s),
    and cut one after another they kept the process some 20 s past its shutdown timeout."""
    for task in background:
        task.cancel()
    done, _ = await asyncio.wait(background, timeout=wait_s)
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            logger.error("a background task had failed: %r", task.exception())


# How long a stopping process waits for its background tasks, once cut (within
# CAUSEWAY_SHUTDOWN_TIMEOUT_S): what still runs then is left to the process's end.
_BACKGROUND_STOP_S = 5.0
_BODILESS = frozenset({"GET", "HEAD", "OPTIONS"})
# Where a route inflates the body itself (OpenLineage clients send gzip).
_INFLATED = "/api/v1/lineage"


def _inflates(scope: Scope) -> bool:
    """Whether the request's route inflates its body itself: its path, under a path
    prefix too (ASGI ``root_path``, which the path then holds), a trailing slash aside."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    return path.rstrip("/") == _INFLATED


def _json(body: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]


def _undecodable(scope: Scope) -> str | None:
    """``"path"`` or ``"query"`` when its percent-encoding is not UTF-8. uvicorn and
    Starlette decode it with U+FFFD for the bytes, which would name another resource (an
    event whose id holds U+FFFD, say) rather than refuse the request."""
    for part, raw in (("path", scope.get("raw_path")), ("query", scope.get("query_string"))):
        if raw and b"%" in raw:
            try:
                unquote_to_bytes(raw).decode("utf-8")
            except UnicodeDecodeError:
                return part
    return None


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str:
    """The first header ``name`` (ASGI names are lower case), as Starlette decodes it."""
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return ""


async def dispose(app: FastAPI) -> None:
    """Close every engine of ``app`` (its lifespan does this; tests without one call it)."""
    await app.state.appender.close()
    await app.state.decisions.close()
    await app.state.wakeups.close()
    await app.state.runner.dispose()
    if app.state.relay is not None:
        await app.state.relay.dispose()
    await app.state.decisions_engine.dispose()
    await app.state.read_router.close()
    await app.state.walks.close()
    await app.state.graphql_reads.dispose()
    await app.state.engine.dispose()


def tune_garbage_collector() -> None:
    """For a serving process, once started. What is allocated by then (modules, the
    schema, pools) lives as long as the process: frozen, collections stop re-scanning it.
    And a request allocates thousands of objects that outlive a young collection (a
    batch of events), so young collections run every 10,000 allocations, not 700.
    Measured on batch ingest: collections took 13% of the process's time, then 2%."""
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


def create_app_from_environment() -> FastAPI:
    """The app for a worker process that ``causeway serve --workers N`` started: it reads
    the settings (and ``CAUSEWAY_DATABASE_URL``, which serve always sets) itself."""
    settings = Settings()
    if settings.database_url is None:
        raise RuntimeError("CAUSEWAY_DATABASE_URL must be set for serve workers")
    return create_app(settings, database_url=settings.database_url, tune_gc=True)
