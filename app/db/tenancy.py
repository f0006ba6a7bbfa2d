"""Row-level security: a tenant's reads see that tenant's rows, whatever their SQL says.

Every tenant-scoped table (``events``, ``api_keys``, the read models, the scheduler's)
has two policies (migration 0015): ``causeway_system`` (``SYSTEM_ROLE``) sees and writes
every row, ``causeway_service`` (``SERVICE_ROLE``) reads only the rows whose ``tenant``
is the session's ``causeway.tenant`` (``TENANT_SETTING``), and none when it is unset.
The service never runs as the tables' owner, who bypasses the policies:

- Its own work runs as the system role: every engine's sessions take it at connection
  start (``app.db.engine.create_engine``). The writer's groups hold many tenants' events;
  the projections, the relay, the verification and the checks of where a replica
  stands read the whole log; the key lookup happens before any tenant is known.
- A request's reads run as the service role, scoped to the caller's tenant, so a query
  that forgets its ``WHERE tenant = ...`` still returns nothing of another tenant's:
  - on a system session (REST reads, on the pool the writer shares),
    ``tenant_transaction`` switches the transaction to the service role with the tenant
    set (``SET LOCAL``, in one round trip); both end with the transaction, so the
    connection goes back to the pool as the system's;
  - GraphQL's reads and walks have pools of their own whose sessions are the service
    role from their start (autocommit: a transaction ends with each statement), and each
    checkout sets its tenant for the session (``scope_session``;
    ``app.db.engine.DriverPool.connect``).

A session's role can be changed back by SQL it runs (``RESET ROLE``, ``SET ROLE``): this
guards against a missing filter, not against SQL injection, which parameters guard
against. The login user's own rights bound what ``SET ROLE`` can reach: in production
it should not be a superuser (docs/deployment.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.engine import SCOPE_SESSION, SERVICE_ROLE, TENANT_SETTING, Connector

_SCOPE_TRANSACTION = text(
    f"SELECT set_config('role', '{SERVICE_ROLE}', true),"
    f" set_config('{TENANT_SETTING}', :tenant, true)"
)


@asynccontextmanager
async def tenant_transaction(
    connector: Connector, tenant: str, *, one_snapshot: bool = False
) -> AsyncIterator[AsyncConnection]:
    """A connection of ``connector`` whose transaction reads as ``tenant`` (the service
    role, the tenant set): what the caller runs on it sees no other tenant's rows. The
    scope ends with the transaction, and with it the connection's use here.
    ``one_snapshot``: every statement of the transaction reads the log as its first did
    (REPEATABLE READ), for reads that must agree with each other."""
    async with connector.connect() as conn:
        if one_snapshot:
            await conn.execution_options(isolation_level="REPEATABLE READ")
        await conn.execute(_SCOPE_TRANSACTION, {"tenant": tenant})
        yield conn


class TenantReads:
    """A ``Connector`` for one tenant's reads: each of its connections is a
    ``tenant_transaction``."""

    def __init__(self, connector: Connector, tenant: str) -> None:
        self._connector = connector
        self.tenant = tenant

    def connect(self) -> AbstractAsyncContextManager[AsyncConnection]:
        return tenant_transaction(self._connector, self.tenant)


class TenantReadsChosenLater:
    """``TenantReads`` on the connector ``choose`` gives (which may wait for a position a
    request named, or raise), chosen at the first connection: after FastAPI has checked a
    request's parameters and its route has read them, so that a malformed request is
    told what is wrong with it at once, rather than held for the wait and told to try
    again (``app.web.dependencies``)."""

    def __init__(self, choose: Callable[[], Awaitable[Connector]], tenant: str) -> None:
        self._choose = choose
        self.tenant = tenant
        self._reads: TenantReads | None = None

    async def choose(self) -> None:
        """Choose now (once): a caller that takes something scarce before it connects (a
        replay its stream slot) waits for the position first, holding nothing."""
        if self._reads is None:
            self._reads = TenantReads(await self._choose(), self.tenant)

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[AsyncConnection]:
        await self.choose()
        if self._reads is None:  # pragma: no cover - chosen just above
            raise RuntimeError("no source chosen")
        async with self._reads.connect() as conn:
            yield conn


async def scope_session(conn: AsyncConnection, tenant: str) -> None:
    """Set ``tenant`` for the session of ``conn``, a connection that runs as the service
    role from its start (GraphQL's reads): until the next checkout sets its own."""
    await conn.exec_driver_sql(SCOPE_SESSION, (tenant,))
