"""Where a read runs, and read-your-writes.

Reads of the log (events, streams, replay, GraphQL) and of the read models (models,
deployments) run on a read replica (``CAUSEWAY_READ_DATABASE_URL``) when one is up and
no further behind than ``read_max_lag_s``, in turn, else on the primary. A watcher
checks each replica every second: its log head against the primary's (lag in
positions), and the age of the first event it lacks (lag in seconds); a replica it
cannot reach or that lags too far is skipped until it is back, and each change is
logged once. Appends, commands, projections and the scheduler use the primary alone.

Every answer to an append or a command carries ``Causeway-Position``; a read that names
a position (``Causeway-Min-Position``, or ``min_position``) waits, up to
``read_wait_ms``, until its source has reached it: a replica's log head, or a read
model's checkpoint on the database it is read from (``has_reached``). Past the wait a
read of the log goes to the primary, which has every answered position; a read model
that has not got there answers 503 with ``Retry-After``. Never an answer older than the
position named.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from app.db.deadlines import NOTHING_LEFT, within
from app.db.engine import Connection, Connector, DriverPool, Engine
from app.errors import BadRequest, Unavailable
from app.projections.base import Projection
from app.projections.checkpoints import has_reached
from app.store.log import read_hash_at, read_head_link
from app.store.records import MAX_POSITION, parse_position
from app.store.replication import ANSWER_S, read_age_s, read_head
from app.telemetry import metrics

logger = logging.getLogger(__name__)

POSITION_HEADER = "Causeway-Position"
MIN_POSITION_HEADER = "Causeway-Min-Position"
MIN_POSITION_PARAMETER = "min_position"
_CHECK_INTERVAL_S = 1.0
_FIRST_POLL_S = 0.002  # a replica is usually milliseconds behind: look again soon, then less
_MAX_POLL_S = 0.05


@dataclass(eq=False)
class ReadSource:
    """One database that serves reads: its connections for REST reads, for GraphQL's
    reads (autocommit, the GraphQL time budget as statement timeout) and walks."""

    name: str
    rest: Connector  # a replica's falls back to the primary when it cannot connect
    direct: Connector  # no fall back: for the checks of where the source stands
    graphql: Connector
    walks: DriverPool
    is_primary: bool
    engines: list[Engine] = field(default_factory=list)  # what closing it disposes
    # Filled in by the watcher:
    is_usable: bool = False
    why: str = "not checked yet"
    head: int = 0
    lag_positions: int = 0
    lag_s: float = 0.0

    async def close(self) -> None:
        await self.walks.close()
        for engine in self.engines:
            await engine.dispose()


async def _asked(source: ReadSource, reached: Callable[[Connection], Awaitable[bool]]) -> bool:
    async with source.direct.connect() as conn:
        return await reached(conn)


async def _head_of(replica: ReadSource) -> tuple[int, bytes]:
    async with replica.direct.connect() as conn:
        return await read_head_link(conn)


def parse_min_position(text: str | None) -> int | None:
    """The position a header or parameter names; a ``BadRequest`` for anything else."""
    if text is None or text.strip() == "":
        return None
    value = parse_position(text.strip())
    if value is None:
        raise BadRequest(
            f"{MIN_POSITION_HEADER} (or {MIN_POSITION_PARAMETER}) must be a position "
            f"(a whole number from 0 to {MAX_POSITION}), got {text[:64]!r}"
        )
    return value


def refuse_repeated_min_position(headers: Sequence[tuple[bytes, bytes]]) -> None:
    """A ``BadRequest`` when a request gives ``Causeway-Min-Position`` more than once:
    frameworks read the first, and a read answered older than a later one would break
    the promise that one named."""
    name = MIN_POSITION_HEADER.lower().encode()
    if sum(key == name for key, _ in headers) > 1:
        raise BadRequest(f"the {MIN_POSITION_HEADER} header is given more than once: send it once")


class ReadRouter:
    """Chooses a source for each read (see the module's docstring)."""

    def __init__(
        self,
        primary: ReadSource,
        replicas: list[ReadSource],
        *,
        max_lag_s: float,
        wait_ms: int,
        check_interval_s: float = _CHECK_INTERVAL_S,
    ) -> None:
        self.primary = primary
        self.replicas = replicas
        self._max_lag_s = max_lag_s
        self._wait_s = wait_ms / 1000
        self._check_interval_s = check_interval_s
        self._turn = itertools.cycle(replicas)
        self._on_replicas = False  # whether any replica serves reads (for the log line)

    def choose(self) -> ReadSource:
        """The next usable replica in turn, else the primary."""
        for _ in self.replicas:
            replica = next(self._turn)
            if replica.is_usable:
                return replica
        return self.primary

    async def for_log(self, min_position: int | None) -> ReadSource:
        """The source for a read of the log that must show ``min_position``: a replica
        that reaches it within the wait, else the primary once it does (a position from
        another deployment, or from before a failover, may be past its head); else
        ``Unavailable``."""
        source = self.choose()
        if min_position is None or (not source.is_primary and source.head >= min_position):
            return source
        deadline = time.monotonic() + self._wait_s

        def reached(conn: Connection) -> Awaitable[bool]:
            return _head_reaches(conn, min_position)

        if not source.is_primary:
            if await self._reaches(source, reached, deadline):
                return source
            source = self.primary
        if await self._reaches(source, reached, deadline):
            return source
        raise Unavailable(
            f"the log has not reached position {min_position} within "
            f"{self._wait_s * 1000:g} ms; try again shortly",
            headers={"Retry-After": "1"},
            min_position=min_position,
        )

    async def for_read_model(self, projection: Projection, min_position: int | None) -> ReadSource:
        """The source for a read of ``projection``'s read model that must show
        ``min_position``; ``Unavailable`` when none has reached it within the wait."""
        source = self.choose()
        if min_position is None:
            return source
        deadline = time.monotonic() + self._wait_s

        def reached(conn: Connection) -> Awaitable[bool]:
            return has_reached(conn, projection, min_position)

        if not source.is_primary:
            if await self._reaches(source, reached, deadline):
                return source
            source = self.primary
        if await self._reaches(source, reached, deadline):
            return source
        raise self._not_there(projection, min_position)

    async def settle_on_primary(
        self, chain: Sequence[Projection], min_position: int | None
    ) -> None:
        """Wait until each read model of ``chain`` shows ``min_position`` on the primary
        (the scheduler's reads, which stay there), the next one of the chain what the log
        held when the one before got there: the dispatcher's decisions for an event come
        after it in the log, and the task rows fold them. ``Unavailable`` past the wait."""
        if min_position is None:
            return
        deadline = time.monotonic() + self._wait_s
        position = min_position
        for projection in chain:
            reached = partial(_model_reaches, projection=projection, position=position)
            if not await self._reaches(self.primary, reached, deadline):
                raise self._not_there(projection, min_position)
            async with self.primary.rest.connect() as conn:
                position = max(position, await read_head(conn))

    def _not_there(self, projection: Projection, min_position: int) -> Unavailable:
        return Unavailable(
            f"the {projection.name} read model has not reached position {min_position} "
            f"within {self._wait_s * 1000:g} ms; try again shortly",
            headers={"Retry-After": "1"},
            projection=projection.name,
            min_position=min_position,
        )

    async def _reaches(
        self,
        source: ReadSource,
        reached: Callable[[Connection], Awaitable[bool]],
        deadline: float,
    ) -> bool:
        """Whether ``source`` gets to what ``reached`` asks by ``deadline`` (asked at least
        once). A replica that fails to answer is marked down, and does not."""
        delay = _FIRST_POLL_S
        while True:
            try:
                if source.is_primary:
                    found = await _asked(source, reached)
                else:  # a replica that does not answer is gone
                    found = await within(_asked(source, reached), ANSWER_S, left=NOTHING_LEFT)
                if found:
                    return True
            except Exception as exc:
                if source.is_primary:
                    raise
                self.mark_down(source, exc)
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, _MAX_POLL_S)

    def mark_down(self, replica: ReadSource, exc: BaseException) -> None:
        """A replica that failed a read: skipped until the watcher finds it back."""
        if isinstance(exc, TimeoutError) and not str(exc):
            why = f"no answer within {ANSWER_S:g} s"
        else:
            why = f"unreachable ({_first_line(exc)})"
        self._set(replica, usable=False, why=why)

    async def watch(self) -> None:
        """Check every replica each interval, until cancelled (an app's lifespan)."""
        if not self.replicas:
            return
        while True:
            try:
                await self.check()
            except Exception:  # one round's failure must not end the watch (nor its gauges)
                logger.exception(
                    "read replicas: a check failed; checking again in %g s", self._check_interval_s
                )
            await asyncio.sleep(self._check_interval_s)

    async def check(self) -> None:
        """One round of the watcher: every replica's head and lag, usable or not."""
        try:
            async with self.primary.rest.connect() as conn:
                primary_head = await read_head(conn)
        except Exception as exc:
            # Nothing to measure against: each replica keeps its state, reads their source.
            logger.warning("read replicas: the primary is unreachable: %s", _first_line(exc))
            return
        for replica in self.replicas:
            try:
                head, link = await within(_head_of(replica), ANSWER_S, left=NOTHING_LEFT)
            except Exception as exc:  # one that does not answer (TimeoutError) too
                self.mark_down(replica, exc)
                continue
            try:
                async with self.primary.rest.connect() as conn:
                    ours = await read_hash_at(conn, head) if head else link
            except Exception as exc:
                logger.warning("read replicas: the primary is unreachable: %s", _first_line(exc))
                return
            if ours != link:
                # Another database (another cluster, a promoted standby written since):
                # its head would vouch for positions the primary's log does not hold.
                why = f"not a copy of the primary (its event at position {head} is not ours)"
                self._set(replica, usable=False, why=why)
                continue
            lag_positions, lag_s = max(primary_head - head, 0), 0.0
            if lag_positions:
                try:
                    async with self.primary.rest.connect() as conn:
                        lag_s = await read_age_s(conn, head + 1)
                except Exception as exc:
                    # Nothing to measure against: every replica keeps its state (and
                    # serves reads as it did) until the next round.
                    logger.warning(
                        "read replicas: the primary is unreachable: %s", _first_line(exc)
                    )
                    return
            replica.head, replica.lag_positions, replica.lag_s = head, lag_positions, lag_s
            if replica.lag_s > self._max_lag_s:
                why = (
                    f"{replica.lag_s:.1f} s behind (more than {self._max_lag_s:g} s, "
                    f"{replica.lag_positions} positions)"
                )
                self._set(replica, usable=False, why=why)
            else:
                self._set(replica, usable=True, why="in use")

    def _set(self, replica: ReadSource, *, usable: bool, why: str) -> None:
        changed = usable != replica.is_usable or (not usable and replica.why == "not checked yet")
        replica.is_usable = usable
        replica.why = why
        if changed:
            if usable:
                logger.info("read replica %s: in use", replica.name)
            else:
                logger.warning("read replica %s skipped: %s", replica.name, why)
        on_replicas = any(r.is_usable for r in self.replicas)
        if on_replicas != self._on_replicas:
            self._on_replicas = on_replicas
            if on_replicas:
                logger.info("reads go to the read replicas again")
            else:
                logger.warning("no read replica is usable: reads fall back to the primary")

    def exposition(self) -> bytes:
        """Each replica's lag and whether it serves reads, in Prometheus' text format
        (nothing without replicas)."""
        if not self.replicas:
            return b""
        positions = metrics.GaugeMetricFamily(
            "causeway_read_replica_lag_positions",
            "Events the primary has that the read replica does not show yet",
            labels=["replica"],
        )
        seconds = metrics.GaugeMetricFamily(
            "causeway_read_replica_lag_seconds",
            "Age of the first event the read replica does not show yet (0: caught up)",
            labels=["replica"],
        )
        up = metrics.GaugeMetricFamily(
            "causeway_read_replica_up",
            "1 when the read replica serves reads, 0 when it is skipped (down or behind)",
            labels=["replica"],
        )
        for replica in self.replicas:
            positions.add_metric([replica.name], replica.lag_positions)
            seconds.add_metric([replica.name], replica.lag_s)
            up.add_metric([replica.name], 1 if replica.is_usable else 0)
        return metrics.figures([positions, seconds, up])

    async def close(self) -> None:
        """Close the replicas' connections (the primary's belong to the app)."""
        for source in self.replicas:
            with contextlib.suppress(Exception):
                await source.close()


def _model_reaches(conn: Connection, *, projection: Projection, position: int) -> Awaitable[bool]:
    return has_reached(conn, projection, position)


async def _head_reaches(conn: Connection, position: int) -> bool:
    return await read_head(conn) >= position


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
