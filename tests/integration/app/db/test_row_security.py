"""Row-level security against a real PostgreSQL: the service runs as a role that owns no
table, and a tenant's read sees no other tenant's rows even when its SQL forgets the
tenant (app.db.tenancy, migration 0015)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest
from fastapi import FastAPI
from sqlalchemy import URL, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import SERVICE_ROLE, SYSTEM_ROLE, DriverPool, create_engine
from app.db.tables import metadata
from app.db.tenancy import TenantReads, tenant_transaction
from app.store.keys import KeyStore, Scope
from app.store.log import EventLog
from app.store.records import NewEvent
from tests.integration.app.graphql.workflow import ask
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import STRUCTURED, dumps
from tests.integration.events import event as cloudevent

# Every table with a tenant column: a new one without its policies fails the test below.
TENANT_TABLES = tuple(sorted(t.name for t in metadata.sorted_tables if "tenant" in t.c))


@pytest.fixture
async def engine(database_url: URL) -> AsyncIterator[AsyncEngine]:
    """An engine as the service makes them (not the tests' owner engine)."""
    engine = create_engine(database_url, pool_size=2)
    yield engine
    await engine.dispose()


@pytest.fixture
async def two_tenants(engine: AsyncEngine) -> AsyncEngine:
    """Events and a key of tenants ``a`` and ``b``, written as the service writes them."""
    for tenant in ("a", "b"):
        async with engine.begin() as conn:
            await KeyStore(conn).create(tenant, frozenset({Scope.READ}))
            await EventLog(conn).append(
                tenant,
                [NewEvent(id=f"{tenant}-{i}", source="/s", type="t", stream="s") for i in range(3)],
            )
    return engine


async def test_the_service_runs_as_a_role_that_owns_no_table(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT current_user"))).scalar() == SYSTEM_ROLE
        owned = await conn.execute(
            text("SELECT count(*) FROM pg_tables WHERE tableowner = current_user")
        )
        assert owned.scalar() == 0
        with pytest.raises(DBAPIError, match="permission denied"):
            await conn.execute(text("CREATE TABLE mine (x int)"))


async def test_every_tenant_table_has_row_level_security(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        found = await conn.execute(
            text("SELECT relname FROM pg_class WHERE relrowsecurity AND relkind = 'r'")
        )
        assert {row[0] for row in found} == set(TENANT_TABLES)


async def test_a_query_without_its_tenant_filter_returns_nothing_of_another_tenants(
    two_tenants: AsyncEngine,
) -> None:
    async with tenant_transaction(two_tenants, "a") as conn:
        ids = (await conn.execute(text("SELECT id FROM events ORDER BY position"))).scalars()
        assert list(ids) == ["a-0", "a-1", "a-2"]
        for table in TENANT_TABLES:
            others = await conn.execute(
                text(f"SELECT count(*) FROM {table} WHERE tenant <> 'a'")  # noqa: S608 (ours)
            )
            assert others.scalar() == 0, table
        keys = await conn.execute(text("SELECT DISTINCT tenant FROM api_keys"))
        assert list(keys.scalars()) == ["a"]


async def test_the_scope_ends_with_its_transaction(two_tenants: AsyncEngine) -> None:
    """The pooled connection goes back as the system's: the next user sees every tenant."""
    reads = TenantReads(two_tenants, "b")
    async with reads.connect() as conn:
        assert (await conn.execute(text("SELECT current_user"))).scalar() == SERVICE_ROLE
        assert (await conn.execute(text("SELECT count(*) FROM events"))).scalar() == 3
    async with two_tenants.connect() as conn:
        assert (await conn.execute(text("SELECT current_user"))).scalar() == SYSTEM_ROLE
        assert (await conn.execute(text("SELECT count(*) FROM events"))).scalar() == 6


async def test_a_tenants_read_cannot_write(two_tenants: AsyncEngine) -> None:
    async with tenant_transaction(two_tenants, "a") as conn:
        with pytest.raises(DBAPIError, match="permission denied"):
            await conn.execute(text("DELETE FROM api_keys"))


@pytest.fixture
async def service_engine(database_url: URL) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url, pool_size=1, role=SERVICE_ROLE)
    yield engine
    await engine.dispose()


async def test_a_service_session_with_no_tenant_set_sees_no_row(
    two_tenants: AsyncEngine, service_engine: AsyncEngine
) -> None:
    async with service_engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM events"))).scalar() == 0


async def test_a_walks_pool_connection_reads_as_the_tenant_it_was_taken_for(
    two_tenants: AsyncEngine, database_url: URL
) -> None:
    pool = DriverPool(database_url, min_size=1, max_size=1, statement_timeout_ms=0, wait_s=5)
    try:
        for tenant in ("a", "b", "a"):  # one connection, taken for each tenant in turn
            async with pool.connect(tenant) as conn:
                cursor = await conn.execute("SELECT DISTINCT tenant FROM events")
                assert [row[0] for row in await cursor.fetchall()] == [tenant]
        with pytest.raises(RuntimeError, match="for a tenant"):
            async with pool.connect():
                pass
    finally:
        await pool.close()


def test_an_owner_still_sees_every_row(two_tenants: AsyncEngine, database_url: URL) -> None:
    """Enabled, not forced: migrations and an operator's psql (the owner) see it all."""
    from app.db.engine import libpq_conninfo

    with psycopg.connect(libpq_conninfo(database_url)) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (6,)


async def test_an_audit_verifies_the_chain_through_another_tenants_events(
    app: FastAPI, make_key: MakeKey
) -> None:
    """The chain runs across tenants: each of ``a``'s events is sealed by the next event
    of the log, here ``b``'s, which ``a``'s reads cannot see but its walk checks."""
    async with (
        asgi_client(app, await make_key("a", "ingest,read")) as a,
        asgi_client(app, await make_key("b", "ingest,read")) as b,
    ):
        for client, body in (
            (a, cloudevent(id="a-cause")),
            (b, cloudevent(id="b-between")),
            (a, cloudevent(id="a-decision", causationid="a-cause")),
            (b, cloudevent(id="b-after")),
        ):
            response = await client.post("/events", content=dumps(body), headers=STRUCTURED)
            assert response.status_code == 201, response.text
        audit = await ask(
            a, '{ audit(decisionId: "a-decision") { chainVerified sourceEvents { id } } }'
        )
        assert audit["data"]["audit"] == {
            "chainVerified": True,
            "sourceEvents": [{"id": "a-cause"}],
        }
        across = await ask(a, '{ event(id: "b-between") { id } }')
        assert across["data"]["event"] is None


async def test_readyz_says_to_migrate_when_the_server_lacks_the_role(
    app: FastAPI, database_url: URL
) -> None:
    """A server that never ran `causeway migrate` has no role for the service's sessions:
    readiness names it and the fix, not "unreachable"."""
    real = app.state.engine
    app.state.engine = create_engine(database_url, pool_size=1, role="causeway_not_made")
    try:
        async with asgi_client(app, "no key needed") as client:
            response = await client.get("/readyz")
    finally:
        await app.state.engine.dispose()
        app.state.engine = real
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.json()["detail"] == (
        "the database server has no role causeway_not_made, which the service runs as;"
        " run `causeway migrate`"
    )
