"""Engines from a database URL. Only composition roots call these; the rest is handed one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol, cast

import orjson
import psycopg
from psycopg import AsyncConnection as PsycopgConnection
from psycopg import AsyncRawCursor, AsyncRawServerCursor, AsyncServerCursor
from psycopg.conninfo import make_conninfo
from psycopg.rows import namedtuple_row
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout
from sqlalchemy import URL, make_url
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement

from app.db.deadlines import within
from app.errors import Unavailable

# The handles the composition roots build and hand down. The faces and the scheduler's
# commands open transactions on them (``async with engine.begin()``) and pass the
# connection to the store, which alone writes SQL; they name the types from here, so
# that only the database layer, the store and the projections import SQLAlchemy.
Engine = AsyncEngine
Connection = AsyncConnection

# Row-level security (``app.db.tenancy``, migration 0015): the roles sessions run as, and
# the setting that names a tenant-scoped session's tenant.
SYSTEM_ROLE = "causeway_system"  # every tenant's rows: the service's own work
SERVICE_ROLE = "causeway_service"  # one tenant's rows, read only: a tenant's reads
TENANT_SETTING = "causeway.tenant"


class Connector(Protocol):
    """What reads connect through: an ``Engine``, or a replica's ``Connector``
    (``app.store.replication``), which falls back to the primary."""

    def connect(self) -> AbstractAsyncContextManager[AsyncConnection]: ...


DriverConnection = PsycopgConnection  # a walk's, from ``DriverPool``


def _json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


# libpq waits for ever on a host that takes the connection and never answers (a frozen
# host, a proxy in front of a partition): `serve`, `migrate` and `verify` hung there with
# no word, and so did every request that needed a new pooled connection.
CONNECT_TIMEOUT_S = 10


def bounded(url: str | URL) -> URL:
    """``url`` with libpq's ``connect_timeout`` (``CONNECT_TIMEOUT_S``) unless it names
    one: every connection Causeway opens goes through here (``async_url``,
    ``libpq_conninfo``, ``app.db.schema.sync_url``)."""
    # make_url, not str(): str() of a URL masks its password.
    parsed = make_url(url)
    if "connect_timeout" in parsed.query:
        return parsed
    return parsed.update_query_dict({"connect_timeout": str(CONNECT_TIMEOUT_S)})


def async_url(url: str | URL) -> URL:
    """``url`` with the psycopg 3 driver, whatever driver it named, and a connect timeout."""
    return bounded(url).set(drivername="postgresql+psycopg")


def create_engine(
    url: str | URL,
    *,
    pool_size: int = 5,
    statement_timeout_ms: int = 30_000,
    pool_timeout_s: float = 30.0,
    pre_ping: bool = False,
    role: str | None = SYSTEM_ROLE,
) -> AsyncEngine:
    """``pool_timeout_s``: how long a checkout waits for a connection to come free;
    ``pre_ping``: a checkout tests its connection first (a round trip), and replaces one
    that broke (for replicas, which may go away while the service runs); ``role``: what
    its sessions run as (``app.db.tenancy``), None for the login user's own (the owner's,
    for what creates or alters tables: migrations, tests' own tables)."""
    options = _session_options(statement_timeout_ms, generic_plans=False, role=role)
    return create_async_engine(
        async_url(url),
        pool_size=pool_size,
        pool_timeout=pool_timeout_s,
        pool_pre_ping=pre_ping,
        json_serializer=_json_text,
        # orjson reads integers past 64 bits as floats; the chain hashes numbers as doubles,
        # so nothing that matters changes, and it decodes jsonb several times faster.
        json_deserializer=orjson.loads,
        connect_args={"options": options},
    )


def _session_options(
    statement_timeout_ms: int, *, generic_plans: bool, role: str | None = SYSTEM_ROLE
) -> str:
    """``generic_plans``: prepared statements keep one generic plan instead of being
    planned again for each execution's parameters (``plan_cache_mode``), for sessions
    that run statements whose best plan does not depend on their parameters. ``role``:
    the session's role from its start (``RESET ROLE`` comes back to it, not to the login
    user)."""
    # Sessions in UTC, whatever the server's TimeZone: psycopg reads timestamptz in the
    # session's zone, and under a zone west of UTC a stored 0001-01-01T00:00:00Z (Go's
    # zero time) reads back as a year Python cannot hold.
    options = "-c TimeZone=UTC"
    if statement_timeout_ms:
        options += f" -c statement_timeout={statement_timeout_ms}"
    if generic_plans:
        options += " -c plan_cache_mode=force_generic_plan"
    if role is not None:
        options += f" -c role={role}"
    return options


def libpq_conninfo(url: str | URL) -> str:
    """``url`` as a libpq connection string (for psycopg itself, without SQLAlchemy), each
    value quoted as libpq needs: a rendered URL keeps a space in a password, say, which
    libpq then refuses."""
    parsed = bounded(url)
    params: dict[str, Any] = parsed.translate_connect_args(username="user", database="dbname")
    for key, value in parsed.query.items():
        # A key given more than once (host=a&host=b) is libpq's comma-separated list.
        params[key] = value if isinstance(value, str) else ",".join(value)
    return make_conninfo("", **{key: str(value) for key, value in params.items()})


class DriverPool:
    """psycopg connections with no SQLAlchemy around them, in autocommit, for reads that
    go straight to the driver and stand alone (GraphQL's walks): SQLAlchemy's checkout
    and return (greenlets, pool events, the reset) took a quarter of a millisecond of
    each audit, psycopg_pool's a fiftieth. Sessions are in UTC with the statement timeout
    given, as ``create_engine``'s; nothing else of an engine's is set (no JSON loaders:
    the walk reads JSON as text and decodes it itself).

    ``open`` starts connecting (an app's lifespan calls it); ``connect`` opens the pool
    too, for an app run without one. A connection that broke under its user is dropped
    when it comes back, and replaced, and the idle ones are checked then (a database
    restart breaks them all). Past ``wait_s`` without a free connection (all in use, or
    the database unreachable), and once closed, ``connect`` refuses with
    ``Unavailable``."""

    # A series of connection attempts that keep failing gives up after this long, each
    # attempt after _CONNECT_S, and the next request starts another series: the pool is
    # back within seconds of the database.
    _RECONNECT_S = 5.0
    _CONNECT_S = 5
    _MAX_IDLE_S = 60.0  # past min_size, one connection closes per minute unused

    def __init__(
        self,
        url: str | URL,
        *,
        min_size: int,
        max_size: int,
        statement_timeout_ms: int,
        wait_s: float,
        generic_plans: bool = False,
        name: str | None = None,
        role: str = SERVICE_ROLE,
        answer_s: float | None = None,
    ) -> None:
        """``role``: what its sessions run as; a pool of ``SERVICE_ROLE`` (a tenant's
        reads) hands out connections only for a tenant (``connect(tenant)``).
        ``answer_s`` (a replica's pool): a connection is handed out only once it has
        answered a round trip (its session set for the tenant, else ``SELECT 1``) within
        that time, else the checkout raises ``Unanswered`` at once (a server frozen since
        it was last seen never refuses; it just never answers). The wait for a connection
        to come free is ``wait_s``'s."""
        self._role = role
        self._wait_s = wait_s
        self._answer_s = answer_s
        self._closed = False
        self._checking: asyncio.Task[None] | None = None
        self._pool = AsyncConnectionPool(
            libpq_conninfo(url),
            min_size=min_size,
            max_size=max_size,
            kwargs={
                "autocommit": True,
                "application_name": f"causeway {name or 'driver pool'}",  # in pg_stat_activity
                "connect_timeout": self._CONNECT_S,
                "options": _session_options(
                    statement_timeout_ms, generic_plans=generic_plans, role=role
                ),
            },
            open=False,
            name=name,
            timeout=wait_s,
            max_idle=self._MAX_IDLE_S,
            reconnect_timeout=self._RECONNECT_S,
        )

    async def open(self) -> None:
        if self._closed:
            raise Unavailable("the service is shutting down")
        await self._pool.open()  # once: concurrent and later calls find it open

    @asynccontextmanager
    async def connect(self, tenant: str | None = None) -> AsyncIterator[PsycopgConnection[Any]]:
        """A connection of the pool; for a tenant's reads, its session scoped to ``tenant``
        (set on every checkout, so none reads as the tenant of the request before)."""
        if tenant is None and self._role == SERVICE_ROLE:
            raise RuntimeError("this pool's connections read for a tenant: connect(tenant)")
        conn = await self._checkout(tenant)
        try:
            yield conn
        finally:
            await self._give_back(conn)

    async def _checkout(self, tenant: str | None) -> PsycopgConnection[Any]:
        """A connection, its session scoped to ``tenant``. One that a server's restart
        broke (its first statement fails so) goes back, the pool drops it and checks its
        idle ones, which the restart broke too, and another is taken: it was handed out,
        and the read it was for failed (on a replica, which was then taken as down). With
        ``answer_s``, a first statement that takes longer raises ``Unanswered`` (the wait
        for a connection to come free is ``wait_s``'s: a busy pool is no frozen server)."""
        conn = await self._getconn()
        try:
            return await self._first_answer(conn, tenant)
        except psycopg.OperationalError as exc:
            if not conn.broken:
                raise
            broken = exc
        # A restart's: the others went with it. If no other comes at once (the server is
        # gone, not back), the failure is the broken connection's, as a read's would be.
        await self._pool.check()
        try:
            conn = await self._getconn(self._answer_s)
        except Unavailable:
            raise broken from None
        return await self._first_answer(conn, tenant)

    async def _first_answer(
        self, conn: PsycopgConnection[Any], tenant: str | None
    ) -> PsycopgConnection[Any]:
        if self._answer_s is None:
            return await self._answered(conn, tenant)
        try:
            answered = self._answered(conn, tenant)
            return await within(answered, self._answer_s, left=self._give_back)
        except TimeoutError as exc:
            raise Unanswered(f"the database did not answer within {self._answer_s:g} s") from exc

    async def _answered(
        self, conn: PsycopgConnection[Any], tenant: str | None
    ) -> PsycopgConnection[Any]:
        """``conn``, once its first statement (the tenant's scope; ``SELECT 1`` to see it
        answer) has answered; given back when that fails or is cut (the client left,
        ``within``'s time ran out: it is given back once the cut statement ends)."""
        try:
            if tenant is not None:
                await conn.execute(SCOPE_SESSION, (tenant,))
            elif self._answer_s is not None:
                await conn.execute("SELECT 1")
        except BaseException:
            await self._give_back(conn)
            raise
        return conn

    async def _getconn(self, wait_s: float | None = None) -> PsycopgConnection[Any]:
        """A connection of the pool, within ``wait_s`` (else the pool's own wait)."""
        try:
            if self._pool.closed:
                await self.open()
            return await self._pool.getconn(wait_s)
        except PoolClosed as exc:
            raise Unavailable("the service is shutting down") from exc
        except PoolTimeout as exc:
            raise Unavailable(
                f"no database connection came free within {wait_s or self._wait_s:g} s"
            ) from exc

    async def _give_back(self, conn: PsycopgConnection[Any]) -> None:
        if conn.broken and self._checking is None:
            # One broke: after a database restart every idle one has, and each would
            # fail a walk of its own. The pool replaces those it finds broken.
            self._checking = asyncio.create_task(self._check())
        # Shielded: a cancellation while the pool takes it back (it waits for its lock
        # while it closes, say) would lose the connection.
        await asyncio.shield(self._pool.putconn(conn))

    def figures(self) -> tuple[int, int]:
        """(connections in use, requests waiting for one), for ``causeway_db_pool_*``."""
        stats = self._pool.get_stats()
        in_use = stats.get("pool_size", 0) - stats.get("pool_available", 0)
        return in_use, stats.get("requests_waiting", 0)

    async def _check(self) -> None:
        try:
            await self._pool.check()
        finally:
            self._checking = None

    async def close(self) -> None:
        self._closed = True
        if self._checking is not None:
            self._checking.cancel()
        await self._pool.close()


class Unanswered(TimeoutError):
    """A connection of a ``DriverPool`` with ``answer_s`` did not answer its first
    statement in that time: its server froze, or a partition cut it off."""


# The tenant of a session that runs as SERVICE_ROLE from its start (walks, GraphQL's reads,
# through ``app.db.tenancy.scope_session``): in the driver's own parameter style.
SCOPE_SESSION = f"SELECT set_config('{TENANT_SETTING}', %s, false)"


async def driver_of(conn: AsyncConnection) -> PsycopgConnection[Any]:
    """The psycopg connection under ``conn``, for the hot paths that skip SQLAlchemy's
    per-statement and per-row work (appends, replays)."""
    raw = await conn.get_raw_connection()
    return raw.driver_connection  # type: ignore[return-value]  # psycopg under SQLAlchemy


# Compiled with PostgreSQL's own placeholders ($1, $2, ...), which psycopg's raw cursors
# send as they are, with the values in a list: a query in psycopg's "%(name)s" style is
# parsed into them, and its values reordered, at every execution once it is longer than
# psycopg caches (4,096 bytes). The lock-and-scan and the row writes of a lease request
# that completes are longer: 40 us each, every time.
_PSYCOPG = psycopg_dialect.dialect(paramstyle="numeric_dollar")  # type: ignore[no-untyped-call]


_ADVISORY_LOCK = "SELECT pg_advisory_xact_lock($1, hashtext($2))"


@dataclass(frozen=True, slots=True)
class DriverStatement:
    """A Core statement compiled once, to run on the driver under a SQLAlchemy connection
    (``driver_of``), in that connection's transaction. For statements on a path taken
    many times a second: through SQLAlchemy, a simple statement costs this service two
    and a half times the CPU it costs on the driver (its execution context, the hop
    through a greenlet, the result's row processing). ``fixed`` are the values of the
    parameters the statement sets itself (SQLAlchemy sends literals as parameters). Values
    come back as psycopg reads them (``jsonb`` as SQLAlchemy's engine configured it), in
    plain tuples from ``first`` and named tuples from ``rows``; ``jsonb`` parameters go as
    ``psycopg.types.json.Jsonb``."""

    sql: str
    # The parameter of each placeholder: ``$1`` is ``names[0]``'s.
    names: tuple[str, ...]
    fixed: Mapping[str, Any]

    @classmethod
    def of(cls, statement: ClauseElement) -> DriverStatement:
        compiled = cast(SQLCompiler, statement.compile(dialect=_PSYCOPG))
        binds = compiled.binds
        fixed = {
            name: value
            for name, value in compiled.params.items()
            if name in binds and not binds[name].required  # a value, None too, not a slot
        }
        return cls(str(compiled), tuple(compiled.positiontup or ()), fixed)

    def parameters(self, values: Mapping[str, Any]) -> list[Any]:
        """``values`` (and the fixed ones) in placeholder order; a missing one is an error."""
        fixed = self.fixed
        try:
            return [values[n] if n in values else fixed[n] for n in self.names]
        except KeyError as missing:
            raise TypeError(f"no value for the statement's parameter {missing}") from None

    async def first(self, conn: AsyncConnection, **values: Any) -> tuple[Any, ...] | None:
        """The first row, or None."""
        async with AsyncRawCursor(await driver_of(conn)) as cursor:
            await cursor.execute(self.sql, self.parameters(values), prepare=True)
            return await cursor.fetchone()

    async def rows(self, conn: AsyncConnection, **values: Any) -> list[Any]:
        """Every row, as named tuples (``row.position``)."""
        async with AsyncRawCursor(await driver_of(conn), row_factory=namedtuple_row) as cursor:
            await cursor.execute(self.sql, self.parameters(values), prepare=True)
            return await cursor.fetchall()

    async def rows_once_locked(
        self, conn: AsyncConnection, lock: tuple[int, str], **values: Any
    ) -> list[Any]:
        """``rows``, run once ``conn``'s transaction holds the advisory lock ``lock`` (a
        namespace, and a name hashed into it), in the same round trip: psycopg's
        pipeline sends the lock and the statement together, and PostgreSQL starts the
        statement, and takes its snapshot, once the lock is held. So a transaction that
        held the lock before has ended when the statement reads, and what it wrote is
        seen. (The lock is one of two keys: no single-key lock, as the projections'
        leaders take, is ever the same.)"""
        driver = await driver_of(conn)
        async with driver.pipeline():
            async with AsyncRawCursor(driver) as locking:
                await locking.execute(_ADVISORY_LOCK, list(lock), prepare=True)
            async with AsyncRawCursor(driver, row_factory=namedtuple_row) as cursor:
                await cursor.execute(self.sql, self.parameters(values), prepare=True)
                return await cursor.fetchall()

    async def run(self, conn: AsyncConnection, **values: Any) -> None:
        async with AsyncRawCursor(await driver_of(conn)) as cursor:
            await cursor.execute(self.sql, self.parameters(values), prepare=True)

    @asynccontextmanager
    async def cursor(self, conn: AsyncConnection, **values: Any) -> AsyncIterator[Fetcher]:
        """Its rows a fetch at a time (``await fetcher.fetchmany(n)``, named tuples), from a
        server-side cursor in ``conn``'s transaction: PostgreSQL computes a row only when
        it is fetched, so a reader that stops early never pays for the rest."""
        driver = await driver_of(conn)
        query = self.sql, self.parameters(values)
        async with server_cursor(
            driver, "causeway_rows", *query, named_rows=True, raw=True
        ) as cursor:
            yield cursor


@asynccontextmanager
async def server_cursor(
    driver: PsycopgConnection[Any],
    name: str,
    sql: str,
    params: Any,
    *,
    named_rows: bool,
    raw: bool = False,
) -> AsyncIterator[Fetcher]:
    """A server-side cursor ``name`` on ``driver`` (in its transaction) that has run
    ``sql`` with ``params``; its rows are named tuples when ``named_rows``, else tuples.
    ``raw``: ``sql`` has PostgreSQL's placeholders and ``params`` is a sequence (else
    psycopg's ``%(name)s`` and a mapping). Closed on the way out even when the task is
    cancelled while the CLOSE is on the wire: the close is shielded, or psycopg would
    keep the cursor open after the server closed it, and warn when it is collected. It
    ends on its own, before the connection's next statement (it holds the connection's
    lock)."""
    kind = AsyncRawServerCursor if raw else AsyncServerCursor
    cursor: Any = (
        kind(driver, name, row_factory=namedtuple_row) if named_rows else kind(driver, name)
    )
    try:
        await cursor.execute(sql, params)
        yield cursor
    finally:
        await asyncio.shield(cursor.close())


class Fetcher(Protocol):
    async def fetchmany(self, size: int = 0) -> list[Any]: ...
