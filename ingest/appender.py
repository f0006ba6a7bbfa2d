"""Group commit: concurrent appends in one process share one transaction.

While a transaction is committing, new requests queue; the next transaction takes all of
them (up to ``max_group_events`` events and ``max_group_bytes`` of request bodies), so one
fsync serves many requests. A lone request starts a transaction at once: nothing waits
for a group to fill. Each request is planned on its own inside the group
(``EventLog.append_many``), so a conflict or an unknown cause in one request fails that
request only. If PostgreSQL refuses a value or a row of one request (a check the planning
does not make), or planning or writing one request raises, the group is retried one
request at a time, so only that request fails. If the transaction itself fails (a lost
connection, a timeout), every request in it gets that error, and none of them was
written.

Groups commit one after another, so the appender keeps one pooled connection for them and
drives its transactions on psycopg directly: checking a connection out and in, and
SQLAlchemy's transaction, cost a small group more CPU than its statements did. A
connection that broke, or was left inside a transaction (a cancelled group), is
dropped and replaced before the next group.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import AsyncConnection as PsycopgConnection
from psycopg.pq import TransactionStatus
from sqlalchemy.exc import DataError, IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db.engine import driver_of
from app.errors import Unavailable
from app.store.log import append_on
from app.store.records import Appended, NewEvent

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Request:
    tenant: str
    events: Sequence[NewEvent]
    size_bytes: int
    answer: asyncio.Future[list[Appended]]


class Appender:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        max_group_events: int = 10_000,
        max_group_bytes: int = 32 << 20,
    ) -> None:
        self._engine = engine
        self._max_events = max_group_events
        self._max_bytes = max_group_bytes
        self._queue: deque[_Request] = deque()
        self._writer: asyncio.Task[None] | None = None
        self._held: AsyncConnection | None = None
        self._closed = False
        self.groups_committed = 0  # transactions that wrote at least one request
        self.requests_committed = 0

    async def append(
        self, tenant: str, batch: Sequence[NewEvent], *, size_bytes: int = 0
    ) -> list[Appended]:
        """Append ``batch`` atomically; raises the ``AppError`` that refused it."""
        if not batch:
            return []
        answer: asyncio.Future[list[Appended]] = asyncio.get_running_loop().create_future()
        self._queue.append(_Request(tenant, batch, size_bytes, answer))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain(), name="causeway-group-commit")
        return await answer

    async def _drain(self) -> None:
        while self._queue:
            group = self._take()
            try:
                await self._commit(group)
            except BaseException as exc:
                if _fails_alone(exc) and len(group) > 1:
                    # One request's own fault (see _fails_alone): the whole group rolled
                    # back, so retry each request alone and let only the one at fault fail.
                    for request in group:
                        try:
                            await self._commit([request])
                        except Exception as alone:
                            _settle(request, alone)
                    continue
                logger.warning("a group of %d appends failed: %r", len(group), exc)
                for request in group:
                    _settle(request, exc)
                if not isinstance(exc, Exception):
                    # Cancelled (the server is stopping): no group follows, so the requests
                    # queued behind this one are answered now rather than never.
                    while self._queue:
                        _settle(self._queue.popleft(), _stopped())
                    raise
        if self._closed:
            await self._release(invalidate=False)

    async def _commit(self, group: list[_Request]) -> None:
        driver = await self._connection()
        try:
            outcomes = await append_on(driver, [(r.tenant, r.events) for r in group], commit=True)
        except BaseException:
            if not driver.broken and not driver.closed:
                await driver.rollback()
            raise
        self.groups_committed += 1
        self.requests_committed += len(group)
        for request, outcome in zip(group, outcomes, strict=True):
            _settle(request, outcome)

    async def _connection(self) -> PsycopgConnection[Any]:
        """The held connection, idle; else one from the pool that answers. When the
        server went away, every idle connection in the pool went with it: each is tried
        and dropped in turn, so only the group that found the held one dead fails."""
        if self._held is not None:
            driver = await driver_of(self._held)
            if not driver.closed and driver.info.transaction_status == TransactionStatus.IDLE:
                return driver
            await self._release(invalidate=True)
        tries = getattr(self._engine.pool, "checkedin", lambda: 0)()  # idle, maybe dead
        for attempt in range(tries + 1):
            self._held = await self._engine.connect()
            # append_on begins and commits the group's transaction in the round trips of
            # its own statements; the pool resets the mode when the connection goes back.
            await self._held.execution_options(isolation_level="AUTOCOMMIT")
            driver = await driver_of(self._held)
            try:
                await driver.execute("SELECT 1")
                await driver.rollback()
            except psycopg.OperationalError:
                await self._release(invalidate=True)
                if attempt == tries:
                    raise
                continue
            return driver
        raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        """Give the held connection back (the app's shutdown, before the pool closes).
        A group that still comes later returns its connection when it is done."""
        self._closed = True
        if self._writer is not None and not self._writer.done():
            await asyncio.wait([self._writer])
        await self._release(invalidate=False)

    async def _release(self, *, invalidate: bool) -> None:
        held, self._held = self._held, None
        if held is None:
            return
        if invalidate:
            await held.invalidate()
        await held.close()

    def _take(self) -> list[_Request]:
        group = [self._queue.popleft()]
        count, size = len(group[0].events), group[0].size_bytes
        while self._queue:
            following = self._queue[0]
            count += len(following.events)
            size += following.size_bytes
            if count > self._max_events or size > self._max_bytes:
                break
            group.append(self._queue.popleft())
        return group


def _fails_alone(exc: BaseException) -> bool:
    """Whether ``exc`` is one request's own fault rather than the transaction's:
    PostgreSQL refused a value or a row (SQLSTATE class 22 or 23, through the driver or
    wrapped by SQLAlchemy), or the code that plans and writes a request raised. A lost
    connection, a timeout or a cancellation fails every request in the group alike."""
    if isinstance(exc, psycopg.DataError | psycopg.IntegrityError | DataError | IntegrityError):
        return True
    return isinstance(exc, Exception) and not isinstance(
        exc, psycopg.Error | SQLAlchemyError | OSError
    )


def _stopped() -> Unavailable:
    """The answer to a request the appender will never write: each its own error, as each
    is raised in its own request's task."""
    return Unavailable(
        "the server stopped before this request was written; send it again",
        headers={"Retry-After": "1"},
    )


def _settle(request: _Request, outcome: list[Appended] | BaseException) -> None:
    """Answer one request: its positions, or its own error (an ``AppError``)."""
    if request.answer.done():  # the client went away; its events are written all the same
        return
    if isinstance(outcome, BaseException):
        request.answer.set_exception(outcome)
    else:
        request.answer.set_result(outcome)
