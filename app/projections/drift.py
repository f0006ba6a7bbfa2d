"""The drift projection: how far each producer's clock is from the store's, and an alert
when a producer's median drift passes the threshold.

For every event with a ``time`` (Causeway's own ``causeway.*`` events aside: they carry
the time of what caused them, not a producer's clock), drift is ``recorded_at - time``.
Per tenant and source it keeps the last minute's samples (the drift of the source's
first event in each quarter second), with ``recorded_at`` as the clock, so a rebuild
gives the same medians. When the median passes ``alert_s`` either way it appends one
``causeway.alert.raised`` caused by the event that crossed the line, and raises another
only after the median came back within half the threshold (so a median hovering at the
line raises one alert, not one per event). The alert's id is derived from the crossing
event's, so a rebuild finds it appended and appends nothing again. As a projection it
runs once per database (the runner's leader), whatever the number of API processes.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import BigInteger, Boolean, ColumnElement, Text, cast, extract, text
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import drift_sources, events
from app.projections.base import FlushFailed
from app.store.chain import format_recorded_at
from app.store.decision_reads import has_event
from app.store.log import EventLog
from app.store.records import NewEvent
from app.telemetry.drift import DriftMeter

ALERT_RAISED = "causeway.alert.raised"
SOURCE = "causeway:drift"
STREAM = "causeway:drift"  # the scheduler's alerts are on causeway:alert:<queue>
WINDOW_US = 60_000_000  # the last minute, by recorded_at
# A source's sample is the first event of each quarter second (by recorded_at; a group
# commit's events share one): a busy source's state is written 4 times a second at most,
# not per event, and a minute's samples fit in the window.
SLOT_US = 250_000
WINDOW_SAMPLES = 256
# It reads every event: woken, it lets a second's appends gather and takes them in full
# batches (measured: waking for each few events cost ~110 us of server CPU per event).
DRIFT_GATHER_S = 1.0
# Events per batch: it reads six small columns of each, and its reads and writes of the
# sources' state are per batch, not per event (measured under sustained single-event
# load: 112 us of server CPU per event with batches of 10,000, 125 us with 2,000, the
# state read again for each batch).
DRIFT_BATCH = 10_000
# A row takes it ~3 us (a record built per event took ~20): it lets other tasks run every
# this many rows of a batch.
_YIELD_EVERY = 1024
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAMESPACE = uuid.UUID("6c1d2a8e-3f0b-4f4e-9d57-2b8a1e0c7d41")
_Key = tuple[str, str]  # tenant, source
_State = tuple[list[list[int]], bool, float]  # samples, alerting, their median


def _micros_of(column: ColumnElement[datetime]) -> ColumnElement[int]:
    """A ``timestamptz`` column as microseconds since the epoch (exact: PostgreSQL keeps
    microseconds, and ``extract`` gives them as a numeric)."""
    return cast(extract("epoch", column) * 1_000_000, BigInteger)


class DriftWatch:
    """A ``Tallying`` projection: of each event it reads the source and two times."""

    name = "drift"
    tables = (drift_sources,)
    types = None
    columns = (
        events.c.position,
        events.c.tenant,
        events.c.id,
        events.c.source,
        _micros_of(events.c.recorded_at).label("recorded_us"),
        _micros_of(events.c.time).label("time_us"),  # None: the event has no time
    )
    # Causeway's own events (the scheduler's decisions, the alerts this raises) are stamped
    # by this server's clock: they have no drift to tell, and under lease + complete they
    # were most of what it read.
    reads_reserved = False

    def __init__(self, *, alert_s: float | None = None, max_sources: int = 100) -> None:
        """``alert_s``: None raises no alert (the metrics are kept all the same)."""
        self._alert_us = math.inf if alert_s is None else alert_s * 1e6
        self._alert_s = alert_s
        self._meter = DriftMeter(max_sources)
        # Per-source state read in this batch's transaction; a new connection (the next
        # batch, a retry after a rollback, a rebuild) reads it again from the table.
        self._state: dict[_Key, _State] = {}
        # The sources whose state ``flush`` writes, each with its last sample's position.
        self._changed: dict[_Key, int] = {}
        # Each source's last sample (recorded_at), the oldest first: a source with none in
        # the last minute of the log has its median gauge cleared (``_quieten``).
        self._last_sampled: dict[_Key, int] = {}
        self._batch: AsyncConnection | None = None
        # The newest position observed into the metrics by this process: a rebuild, or a
        # batch retried after a rollback, reads events again, and the histogram sees each
        # event once (docs/observability.md).
        self._observed = 0

    async def tally(self, conn: AsyncConnection, rows: Sequence[Any]) -> None:
        if conn is not self._batch:
            self._state.clear()
            self._changed.clear()
            self._batch = conn
        unread = {(r[1], r[3]) for r in rows if r[5] is not None} - self._state.keys()
        if unread:
            try:
                await self._read_all(conn, unread)
            except Exception as exc:
                raise FlushFailed(next(r[0] for r in rows if r[5] is not None)) from exc
        for n, (position, tenant, event_id, source, now_us, time_us) in enumerate(rows, 1):
            if time_us is None:
                continue
            try:
                await self._sample(conn, position, tenant, event_id, source, now_us, time_us)
            except Exception as exc:
                raise FlushFailed(position) from exc
            if n % _YIELD_EVERY == 0:
                await asyncio.sleep(0)  # a batch holds the loop for a few ms at most
        if rows:
            *_, last_us, _ = rows[-1]  # recorded_us: the log's clock, as of the last event
            self._quieten(last_us)

    def _quieten(self, now_us: int) -> None:
        """Clear the median gauge of each source with no sample in the minute up to
        ``now_us`` (the log's clock: the last event read): it has no median now, and
        its last one would keep a drift alert firing for ever."""
        while self._last_sampled:
            key, sampled_us = next(iter(self._last_sampled.items()))
            if sampled_us > now_us - WINDOW_US:
                return
            del self._last_sampled[key]
            self._meter.quiet(*key)

    async def _sample(
        self,
        conn: AsyncConnection,
        position: int,
        tenant: str,
        event_id: str,
        source: str,
        now_us: int,
        time_us: int,
    ) -> None:
        """One event's drift: into the histogram, and into its source's samples when it
        is the first of its slot (then judged against the threshold)."""
        key = (tenant, source)
        samples, alerting, median_us = self._state[key]  # read for the batch (``_read_all``)
        drift_us = now_us - time_us
        median_now = None
        if not samples or samples[-1][0] // SLOT_US != now_us // SLOT_US:
            # The slot's first event: a new sample, and a new median to judge.
            samples = [s for s in samples if s[0] > now_us - WINDOW_US]
            samples.append([now_us, drift_us])
            samples = samples[-WINDOW_SAMPLES:]
            median_us = statistics.median(s[1] for s in samples)
            if abs(median_us) > self._alert_us:
                if not alerting:
                    await self._raise(conn, tenant, event_id, source, now_us, median_us)
                alerting = True
            elif abs(median_us) <= self._alert_us / 2:
                alerting = False
            self._state[key] = (samples, alerting, median_us)
            self._changed[key] = position
            self._last_sampled.pop(key, None)  # to the end: the oldest stay first
            self._last_sampled[key] = now_us
            median_now = median_us / 1e6
        if position > self._observed:
            self._observed = position
            self._meter.observe(tenant, source, drift_us / 1e6, median_now)

    async def flush(self, conn: AsyncConnection) -> None:
        """The state of the batch's changed sources (``Flushing``): one executemany,
        which SQLAlchemy sends as multi-row statements."""
        if not self._changed or conn is not self._batch:
            return
        rows = [
            {
                "tenant": tenant,
                "source": source,
                "samples": self._state[tenant, source][0],
                "alerting": self._state[tenant, source][1],
                "position": position,
            }
            for (tenant, source), position in self._changed.items()
        ]
        self._changed.clear()
        await conn.execute(_UPSERT, rows)

    async def _read_all(self, conn: AsyncConnection, keys: set[_Key]) -> None:
        """The state of each source of ``keys``, in one statement (one a source cost a
        batch of a busy store's events, from 64 sources, a twentieth of the server's
        CPU)."""
        ordered = sorted(keys)
        found = await conn.execute(
            _READ_STATES,
            {"tenants": [k[0] for k in ordered], "sources": [k[1] for k in ordered]},
        )
        for tenant, source, samples, alerting in found:
            median_us = statistics.median(s[1] for s in samples)
            self._state[tenant, source] = (samples, alerting, median_us)
        for key in ordered:
            self._state.setdefault(key, ([], False, 0.0))

    async def _raise(
        self,
        conn: AsyncConnection,
        tenant: str,
        cause: str,
        source: str,
        now_us: int,
        median_us: float,
    ) -> None:
        """The alert for ``source``, caused by the event ``cause`` (recorded at
        ``now_us``), whose sample took its median past the threshold.

        Appended in a transaction of its own, not the batch's: an append holds the log's
        head until its transaction ends, and a rebuild's runs over the whole log, so one
        alert a rebuild raised held every append of every tenant until it was done. The
        batch may still fail after it: its retry, or the next rebuild, finds the alert
        by its id, derived from the crossing event's, and appends nothing again."""
        event_id = f"causeway:alert:{uuid.uuid5(_NAMESPACE, f'{tenant}/{cause}').hex}"
        median_s = round(median_us / 1e6, 6)
        ahead = median_us < 0
        recorded_at = _EPOCH + timedelta(microseconds=now_us)
        alert = NewEvent(
            id=event_id,
            source=SOURCE,
            type=ALERT_RAISED,
            stream=STREAM,
            time=format_recorded_at(recorded_at),
            time_value=recorded_at,
            has_data=True,
            data={
                "kind": "clock_drift",
                "source": source,
                "median_drift_s": median_s,
                "threshold_s": self._alert_s,
                "direction": "ahead" if ahead else "behind",
                # A clock ahead stamps events in the future: orderings and windows by
                # event time break, where lag only delays them.
                "severity": "critical" if ahead else "warning",
            },
            causes=(cause,),
        )
        async with conn.engine.begin() as own:
            if not await has_event(own, tenant, event_id):  # raised before: a rebuild, a retry
                await EventLog(own).append(tenant, [alert])


# The sources' states, the pairs (tenant, source) as two arrays of the same length.
_READ_STATES = text(
    "SELECT s.tenant, s.source, s.samples, s.alerting FROM drift_sources s"
    " JOIN unnest(CAST(:tenants AS text[]), CAST(:sources AS text[])) AS k (tenant, source)"
    " ON s.tenant = k.tenant AND s.source = k.source"
).columns(tenant=Text, source=Text, samples=JSONB, alerting=Boolean)
_INSERT = insert(drift_sources)
_UPSERT = _INSERT.on_conflict_do_update(
    index_elements=["tenant", "source"],
    set_={
        "samples": _INSERT.excluded.samples,
        "alerting": _INSERT.excluded.alerting,
        "position": _INSERT.excluded.position,
    },
)
