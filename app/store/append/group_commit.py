"""Group commit: concurrent appends in one process share one transaction.

Requests queue; each group takes all of them that are queued (up to ``max_group_events``
events and ``max_group_bytes`` of request bodies), so one commit serves many requests. A
lone request starts a group at once: nothing waits for a group to fill. Each request is
planned on its own inside the group, so a conflict or an unknown cause in one request
fails that request only.

A group is written one of three ways:

- **Planned ahead** (the usual way, for the log's only writer): the appender's ``TailCache``
  knows where the head is and what planning needs, so the group is planned before the
  head is locked and written in one round trip (``causeway_append``), while the groups
  before it may still be on their way: up to ``max_in_flight`` groups, each on a
  connection of its own, queue at the head inside PostgreSQL, which hands it from one to
  the next without waiting for this process. Nothing is planned under the lock.
- **Shared** (when other writers append too: other processes or machines): planned the
  same way, one at a time, and moved onto the head and stream versions PostgreSQL finds
  as it is written (``write_shared``); its answers carry where it went.
- **Under the lock** (``append_on``): when the tail does not know (the first group, the
  first after another writer appeared, a group planned ahead was refused or failed), and
  for every group in which an event is a re-send or is refused: lock, look up, plan,
  write, commit.

If PostgreSQL refuses a value or a row of one request (a check the planning does not
make), or planning one request raises, the group is written again under the lock one
request at a time, so only that request fails; if the transaction itself fails (a lost
connection, a timeout), every request in it gets that error. Groups are written without
a wake-up hint (``wake_hints`` sends one once they commit, one every few milliseconds at
most), on psycopg directly, on connections the appender keeps (``connections``)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import psycopg
from sqlalchemy.exc import DataError, IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.errors import Unavailable
from app.store.append.connections import KeptConnection, KeptConnections
from app.store.append.tail_cache import QUIET_GROUPS, Planned, TailCache
from app.store.append.wake_hints import WakeHints
from app.store.append.writes import HeadMoved, MovedGroup, appended_types, write_group, write_shared
from app.store.failures import is_past_limits, is_refusal
from app.store.log import append_on, fetch_facts
from app.store.records import Appended, NewEvent
from app.telemetry import metrics, tracing
from app.telemetry.group_spans import traced_group

logger = logging.getLogger(__name__)


Outcome = list[Appended] | Exception  # where an append's events landed, or its refusal
Then = Callable[[Outcome], None]


@dataclass(slots=True)
class _Request:
    tenant: str
    events: Sequence[NewEvent]
    size_bytes: int
    then: Then
    queued_at: float  # time.perf_counter() when it was queued
    answered: bool = False  # each request is answered once (a group stopped may try again)
    span: Any = None  # the caller's span context, while tracing is on (the group links to it)


@dataclass(frozen=True, slots=True)
class _Flight:
    """A group planned ahead and on its way, on a connection of its own. Its task
    answers the requests when the group is written, and returns how it moved (None: it
    went where planned), or the error."""

    requests: list[_Request]
    planned: Planned
    held: KeptConnection
    task: asyncio.Task[Exception | MovedGroup | None]


class Appender:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        max_group_events: int = 10_000,
        max_group_bytes: int = 32 << 20,
        plan_ahead: bool = True,
        max_in_flight: int = 2,
        tail_capacity: int = 100_000,
        quiet_groups: int = QUIET_GROUPS,
        hint_window_s: float = 0.02,
    ) -> None:
        """``plan_ahead``: False for an appender that shares the log with a busier one in
        the same process (the scheduler's decisions): its groups are written under the
        lock, and the busier one's tail meets them as another writer's.
        ``tail_capacity``: the streams and the event positions the tail keeps, each.
        ``quiet_groups``: groups in a row that no other writer moved, before the appender
        takes itself for the log's only writer again (``tail_cache.TailCache``).
        ``hint_window_s``: the least time between two of its wake-up hints."""
        self._engine = engine
        self._max_events = max_group_events
        self._max_bytes = max_group_bytes
        self._max_in_flight = max_in_flight
        self._tail = (
            TailCache(capacity=tail_capacity, quiet_groups=quiet_groups) if plan_ahead else None
        )
        self._queue: deque[_Request] = deque()
        self._flights: deque[_Flight] = deque()
        self._writer: asyncio.Task[None] | None = None
        self._letting_go: set[asyncio.Task[None]] = set()  # closed writers giving back
        self._in_hand: list[_Request] = []  # the group the writer took, until it is sent
        self._arrived: asyncio.Future[None] | None = None  # the writer waits for a request
        self._held = KeptConnections(engine)
        self._hints = WakeHints(engine, window_s=hint_window_s)
        self._closed = False
        self.groups_committed = 0  # transactions that wrote at least one request
        self.groups_planned_ahead = 0  # of those, the ones planned before the lock
        self.groups_shared = 0  # of those, the ones written onto the head found (shared)
        self.groups_moved = 0  # of those, the ones that others' appends moved
        self.requests_committed = 0

    @property
    def engine(self) -> AsyncEngine:
        """The engine it appends on (for reads beside an append: trace contexts)."""
        return self._engine

    async def append(
        self, tenant: str, batch: Sequence[NewEvent], *, size_bytes: int = 0
    ) -> list[Appended]:
        """Append ``batch`` atomically; raises the ``AppError`` that refused it."""
        answer: asyncio.Future[list[Appended]] = asyncio.get_running_loop().create_future()
        self.submit(tenant, batch, partial(_resolve, answer), size_bytes=size_bytes)
        return await answer

    def submit(
        self, tenant: str, batch: Sequence[NewEvent], then: Then, *, size_bytes: int = 0
    ) -> None:
        """Queue ``batch`` for the next group; ``then`` is called with its outcome once,
        from the writer (it must not raise, nor wait). ``append`` waits on it with a
        future; a caller with no task of its own to wait in can pass its callback."""
        if not batch:
            then([])
            return
        request = _Request(tenant, batch, size_bytes, then, time.perf_counter())
        if tracing.on:
            request.span = tracing.current_span_context()
        self._queue.append(request)
        if self._writer is None or self._writer.done():
            # In a context of its own: it writes the groups of many requests, so its log
            # lines are not the request's that happened to start it (app.telemetry.logs).
            self._writer = asyncio.create_task(
                self._drain(), name="causeway-group-commit", context=contextvars.Context()
            )
        elif self._arrived is not None and not self._arrived.done():
            self._arrived.set_result(None)

    async def _drain(self) -> None:
        try:
            while self._queue or self._flights:
                if self._flights and self._flights[0].task.done():
                    await self._land()
                elif not self._queue:
                    await self._next_arrival_or_landing()
                elif self._tail is None or self._tail.head is None:
                    await self._land_all()
                    await self._commit_under_lock(self._take())
                elif len(self._flights) >= (1 if self._tail.shared else self._max_in_flight):
                    await self._land()
                else:
                    self._in_hand = self._take()
                    await self._send_ahead(self._in_hand, self._tail)
                    self._in_hand = []  # on its way, or answered
        except BaseException:
            # Cancelled (the server is stopping): no group follows, so the requests taken
            # and not yet sent, on their way or queued are answered now rather than never.
            await self._abandon_flights()
            for request in [*self._in_hand, *self._queue]:
                _settle(request, _stopped())  # none that was answered already
            self._in_hand, self._queue = [], deque()
            raise
        finally:
            if self._closed and (writer := self._writer) is not None:
                # From now on a request starts a writer of its own; close() waits for this.
                self._writer = None
                self._letting_go.add(writer)
                writer.add_done_callback(self._letting_go.discard)
                await self._held.release()

    async def _next_arrival_or_landing(self) -> None:
        arrived = self._arrived = asyncio.get_running_loop().create_future()
        waits: list[asyncio.Future[Any]] = [self._flights[0].task, arrived]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._arrived = None

    async def _send_ahead(self, group: list[_Request], tail: TailCache) -> None:
        """Plan ``group`` on the tail and send it; under the lock when the tail cannot."""
        if tail.is_full():
            await self._land_all()  # nothing on its way may rest on the facts dropped
            tail.trim()
        requests = [(r.tenant, r.events) for r in group]
        try:
            held = await self._held.take()
        except Exception as exc:  # none to be had (the server is gone, the pool is full)
            await self._lost(group, exc)
            return
        planned: Planned | None = None
        try:
            while tail.head is not None:
                generation = tail.generation
                wanted = tail.wanted(requests)
                if wanted:
                    tail.learn(
                        await fetch_facts(held.driver, wanted.streams, wanted.causes, wanted.models)
                    )
                while self._flights and self._flights[0].task.done():
                    await self._land()  # a group that failed meanwhile makes the tail forget
                if tail.generation == generation:
                    planned = tail.plan(requests)
                    break
                # It forgot what it had just looked up: what the group needs, again.
        except Exception:
            tail.forget()  # under the lock, the request at fault fails alone
        except BaseException:  # cancelled (the server is stopping): nothing was sent
            await self._held.discard(held)
            raise
        if planned is None:
            self._held.give_back(held)
            await self._land_all()
            await self._commit_under_lock(group)
            return
        flying = self._fly(held, group, planned)
        if tracing.on:
            flying = traced_group(flying, _shape(group), "ahead")
        flight = asyncio.create_task(flying)
        self._flights.append(_Flight(group, planned, held, flight))

    async def _fly(
        self, held: KeptConnection, group: list[_Request], planned: Planned
    ) -> Exception | MovedGroup | None:
        moved = None
        try:
            if planned.shared:
                moved = await write_shared(held.driver, planned.after, planned.group)
            else:
                await write_group(held.driver, planned.after, planned.group, notify=False)
        except Exception as exc:  # the writer decides what follows, in order
            return exc
        outcomes = planned.outcomes
        end = planned.group.position
        if moved is not None:
            outcomes = _moved(group, outcomes, moved)
            end = moved.head.position
        self._hints.landed(end, appended_types(planned.group))
        self.groups_committed += 1
        self.groups_planned_ahead += 1
        self.groups_shared += planned.shared
        self.groups_moved += moved is not None
        self.requests_committed += len(group)
        for request, outcome in zip(group, outcomes, strict=True):
            _settle(request, outcome)
        return moved

    async def _land(self) -> None:
        """Take the oldest group on its way off the list, once it is done: written, or
        written again under the lock, or failed with its requests answered."""
        flight = self._flights[0]
        # Waited for, not awaited: a cancellation of the writer stays the writer's (and
        # the flight, still listed, is _abandon_flights').
        await asyncio.wait([flight.task])
        result = flight.task.result()
        tail = self._tail
        if tail is None:  # pragma: no cover - only a tail sends groups ahead
            raise RuntimeError("a group was sent ahead without a tail")
        if isinstance(result, HeadMoved) and result.behind and tail.still_holds(flight.planned):
            # It reached the head before the group it was planned on (two connections,
            # two backends: PostgreSQL need not take them in the order sent). That one
            # is written now, as nothing failed since: the same plan goes again.
            again = asyncio.create_task(self._fly(flight.held, flight.requests, flight.planned))
            self._flights[0] = flight = _Flight(flight.requests, flight.planned, flight.held, again)
            await asyncio.wait([again])
            result = again.result()
        self._flights.popleft()
        if not isinstance(result, Exception):
            tail.written(flight.planned, result)
            self._held.give_back(flight.held)
            return
        error = result
        # Every group planned after this one rests on it and fails the head check too.
        tail.forget()
        if _fails_alone(error):  # HeadMoved among them: another writer, or the one before
            self._held.give_back(flight.held)
            await self._commit_under_lock(flight.requests)
            return
        await self._lost(flight.requests, error, flight.held)

    async def _land_all(self) -> None:
        while self._flights:
            await self._land()

    async def _abandon_flights(self) -> None:
        """Stop the groups on their way (PostgreSQL cancels their statements) and answer
        the requests of those not written."""
        flights, self._flights = list(self._flights), deque()
        if flights and self._tail is not None:
            self._tail.forget()  # what they claimed may be in the log, or not, or moved
        for flight in flights:
            flight.task.cancel()
        if flights:
            await asyncio.wait([flight.task for flight in flights])
        for flight in flights:
            await self._held.discard(flight.held)
            for request in flight.requests:
                _settle(request, _interrupted())  # none if it was written and answered

    async def _commit_under_lock(self, group: list[_Request]) -> None:
        try:
            try:
                if tracing.on:
                    await traced_group(self._commit(group), _shape(group), "lock")
                else:
                    await self._commit(group)
                return
            except Exception as exc:
                if not _fails_alone(exc) or len(group) == 1:
                    await self._lost(group, exc)
                    return
            # One request's own fault (see _fails_alone): the whole group rolled back, so
            # retry each request alone and let only the one at fault fail.
            for request in group:
                try:
                    await self._commit([request])
                except Exception as alone:
                    _settle(request, alone)
        except BaseException:  # cancelled: the server is stopping
            for request in group:
                _settle(request, _interrupted())  # those not answered yet
            raise

    async def _lost(
        self, group: list[_Request], exc: Exception, held: KeptConnection | None = None
    ) -> None:
        """The transaction (on ``held``, dropped) failed: its requests get the error, first
        (dropping connections waits, and a writer cancelled meanwhile left them unanswered).
        When the server went away, every connection held went with it: they go too."""
        for request in group:
            _settle(request, exc)
        if held is not None:
            await self._held.discard(held)
        if not _fails_alone(exc):
            logger.warning("a group of %d appends failed: %r", len(group), exc)
            await self._held.release()

    async def _commit(self, group: list[_Request]) -> None:
        held = await self._held.take()
        driver = held.driver
        try:
            requests = [(r.tenant, r.events) for r in group]
            landed = await append_on(driver, requests, commit=True, notify=False)
        except BaseException:
            if not driver.broken and not driver.closed:
                await driver.rollback()
            self._held.give_back(held)  # checked again before it is used
            raise
        self._held.give_back(held)
        if self._tail is not None:
            self._tail.restart(landed.found, landed.group)
        if landed.group is not None:
            self._hints.landed(landed.group.position, appended_types(landed.group))
            self.groups_committed += 1
            self.requests_committed += len(group)
        for request, outcome in zip(group, landed.outcomes, strict=True):
            _settle(request, outcome)

    async def close(self) -> None:
        """Give the held connections back (the app's shutdown, before the pool closes),
        once every writer has; one that starts later gives its own back when done."""
        self._closed = True
        if writers := [w for w in (self._writer, *self._letting_go) if w and not w.done()]:
            await asyncio.wait(writers)
        await self._hints.close()
        await self._held.release()

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
        # Per group, not per request: its size, and how long its oldest request waited.
        metrics.QUEUE_WAIT_SECONDS.observe(time.perf_counter() - group[0].queued_at)
        metrics.GROUP_EVENTS.observe(sum(len(r.events) for r in group))
        metrics.GROUP_REQUESTS.observe(len(group))
        return group


def _shape(group: list[_Request]) -> tuple[int, int, int, float, list[Any]]:
    """A group's events, tenants, requests, its oldest request's wait and the requests'
    span contexts, for its span."""
    wait = time.perf_counter() - group[0].queued_at
    tenants = len({r.tenant for r in group})
    events = sum(len(r.events) for r in group)
    return events, tenants, len(group), wait, [r.span for r in group if r.span is not None]


def _moved(
    group: list[_Request], outcomes: list[list[Appended]], moved: MovedGroup
) -> list[list[Appended]]:
    """Where the events of a group that ``write_shared`` moved went."""
    shift, versions = moved.shift, moved.versions
    return [
        [
            Appended(
                a.id,
                a.source,
                a.stream,
                a.stream_version + versions.get((request.tenant, a.stream), 0),
                a.position + shift,
                a.duplicate,
            )
            for a in outcome
        ]
        for request, outcome in zip(group, outcomes, strict=True)
    ]


def _fails_alone(exc: BaseException) -> bool:
    """Whether ``exc`` is one request's own fault rather than the transaction's:
    PostgreSQL refused a value or a row (SQLSTATE class 22, 23 or 54, through the driver or
    wrapped by SQLAlchemy), or the code that plans and writes a request raised (or the
    head moved under a group planned ahead). A lost connection, a timeout or a
    cancellation fails every request in the group alike."""
    if isinstance(exc, psycopg.DataError | psycopg.IntegrityError | DataError | IntegrityError):
        return True
    if is_past_limits(exc):  # an attribute too long to index, say: no retry can succeed
        return True
    return isinstance(exc, Exception) and not isinstance(
        exc, psycopg.Error | SQLAlchemyError | OSError
    )


def _interrupted() -> Unavailable:
    """The answer to a request whose group the server stopped while it was being written:
    its statement is cancelled, but may have committed just before."""
    return Unavailable(
        "the server stopped while this request was being written; send it again "
        "(an event stored already is answered as a duplicate)",
        headers={"Retry-After": "1"},
    )


def _stopped() -> Unavailable:
    """The answer to a request the appender will never write: each its own error, as each
    is raised in its own request's task."""
    return Unavailable(
        "the server stopped before this request was written; send it again",
        headers={"Retry-After": "1"},
    )


def _settle(request: _Request, outcome: Outcome) -> None:
    """Answer one request: its positions, or its own error (an ``AppError``)."""
    if request.answered:
        return
    request.answered = True
    if isinstance(outcome, list):
        duplicate = sum(1 for a in outcome if a.duplicate)
        metrics.count_appended(request.tenant, len(outcome) - duplicate, duplicate)
    elif is_refusal(outcome):
        metrics.count_refused(request.tenant, len(request.events))
    else:  # not answered by the store: the database unreachable, the server stopping
        metrics.count_failed(request.tenant, len(request.events))
    try:
        request.then(outcome)
    except Exception:  # the others in its group are answered all the same
        logger.exception("answering an append failed")


def _resolve(answer: asyncio.Future[list[Appended]], outcome: Outcome) -> None:
    """``append``'s ``then``: the outcome into the future its caller awaits."""
    if answer.done():  # the caller went away; its events are written all the same
        return
    if isinstance(outcome, Exception):
        answer.set_exception(outcome)
    else:
        answer.set_result(outcome)
