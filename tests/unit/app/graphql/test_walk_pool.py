"""GraphQL with no database to answer: a walk whose pool has no connection to give (the
database is down, or the service is shutting down) and any other read. Each is
UNAVAILABLE, as over REST, and a walk says so within its time budget: not a TIMEOUT
(which tells the client to ask for less), not a masked error."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator

import pytest

from app.db.engine import DriverPool, Engine, create_engine
from app.graphql.context import Context
from app.graphql.limits import GraphQLLimits
from app.graphql.schema import create_schema
from app.projections.runner import ProjectionRunner
from app.store.keys import Principal, Scope
from app.web.reads import ReadRouter, ReadSource

AUDIT = 'query { audit(decisionId: "dx-1") { chainVerified } }'
LIMITS = GraphQLLimits(timeout_ms=2000)


@pytest.fixture
def nothing_listening() -> str:
    """A database URL whose port refuses connections."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"postgresql://causeway@127.0.0.1:{port}/causeway"


@pytest.fixture
async def pool(nothing_listening: str) -> AsyncIterator[DriverPool]:
    walks = DriverPool(
        nothing_listening,
        min_size=1,
        max_size=1,
        statement_timeout_ms=LIMITS.timeout_ms,
        wait_s=0.5,
    )
    yield walks
    await walks.close()


def context(engine: Engine, walks: DriverPool, principal: Principal) -> Context:
    """The context of a request that reads on ``engine`` and ``walks`` (no replicas)."""
    source = ReadSource(
        "primary", rest=engine, direct=engine, graphql=engine, walks=walks, is_primary=True
    )
    reads = ReadRouter(source, [], max_lag_s=1.0, wait_ms=0)
    return Context(source, principal, LIMITS, reads=reads, projections=ProjectionRunner(engine, []))


async def audit(walks: DriverPool, url: str) -> dict[str, object]:
    engine = create_engine(url)
    principal = Principal(key_id="k", tenant="acme", scopes=frozenset({Scope.READ}))
    try:
        result = await create_schema(LIMITS).execute(
            AUDIT, context_value=context(engine, walks, principal)
        )
    finally:
        await engine.dispose()
    assert result.data is None
    [error] = result.errors or []
    return {"message": error.message, **(error.extensions or {})}


async def test_an_unreachable_database_is_unavailable_within_the_wait(
    pool: DriverPool, nothing_listening: str, caplog: pytest.LogCaptureFixture
) -> None:
    started = time.monotonic()
    error = await audit(pool, nothing_listening)
    assert time.monotonic() - started < LIMITS.timeout_ms / 1000
    assert error["code"] == "UNAVAILABLE"
    assert error["message"] == "no database connection came free within 0.5 s"
    assert not [r for r in caplog.records if r.exc_info], "no traceback for an outage"


async def test_once_closed_the_pool_refuses_walks_as_shutting_down(
    pool: DriverPool, nothing_listening: str
) -> None:
    await pool.close()
    error = await audit(pool, nothing_listening)
    assert error["code"] == "UNAVAILABLE"
    assert error["message"] == "the service is shutting down"


async def test_any_read_with_the_database_unreachable_is_unavailable_as_over_rest(
    pool: DriverPool, nothing_listening: str
) -> None:
    engine = create_engine(nothing_listening)
    principal = Principal(key_id="k", tenant="acme", scopes=frozenset({Scope.READ}))
    try:
        result = await create_schema(LIMITS).execute(
            '{ event(id: "dx-1") { id } }', context_value=context(engine, pool, principal)
        )
    finally:
        await engine.dispose()
    [error] = result.errors or []
    assert (error.extensions or {})["code"] == "UNAVAILABLE"
    assert "unreachable" in error.message
