"""Getting lineage events into the store: urgently or lazily, in order, nothing lost.

Every event the pipeline makes joins one first-in-first-out queue. Its delivery decides
only *when* the queue is flushed, never the order: an ``immediate`` (red) event flushes at
once, taking everything queued before it along (so its segment, its cause, arrives
first, in the same atomic batch at worst); ``soon`` (yellow) flushes within
``soon_interval_s``; ``lazy`` (green) within ``lazy_interval_s``; a full batch
(``max_batch_events``) flushes at once.

If the store is unreachable (a transport error, 429 or 5xx), the events go to the on-disk
``Spool`` and, as long as the spool holds anything, every later event goes behind them;
the spool is retried with exponential backoff (``retry_min_s`` to ``retry_max_s``) and
drained oldest first. When the spool is full, ``on_full="wait"`` (file input) blocks and
keeps retrying the store, saying so in the log: back-pressure on the reader;
``on_full="drop"`` (live input) drops the events, counts them in ``stats.dropped`` and
logs a warning.

A 4xx answer is not retried: a batch the store refuses is re-sent one event at a time, and
each refused event is logged at error level and kept in the spool's ``rejected.ndjson``
with the store's problem (an effect of a refused cause is refused too, 422, and kept the
same way). 401 and 403 mean the key is wrong for every event, and 404, 405 or a 4xx
whose body is not one of Causeway's problems (``type`` ``/problems/<code>``) mean the
target is no Causeway store: the events are spooled and ``StoreRefused`` is raised.

``hold()`` (after ``StoreRefused``, or when stopping) makes every later flush go to the
spool without trying the store, so that finishing a pipeline loses nothing. A refusal met
while the pipeline puts an event holds the output at once, and is raised by the next
``poll``, ``flush`` or ``close``, not by ``put``: the rest of what the pipeline emits then
(the rest of a segment, the other segments a chunk closed) goes to the spool.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TextIO

import httpx2
import orjson

from evs_bridge.channels import Delivery
from evs_bridge.spool import Spool, SpoolFull
from ingest.client import CausewayClient, CausewayError

log = logging.getLogger(__name__)

Event = dict[str, Any]
OnFull = Literal["wait", "drop"]
_TRANSIENT = {408, 425, 429}


class StoreUnavailable(Exception):
    """The store did not take the events now; try again later."""

    def __init__(self, detail: str, *, done: int = 0) -> None:
        super().__init__(detail)
        self.done = done
        """How many of the events were taken before the store went away."""


class StoreRefused(Exception):
    """The store refuses this bridge (401/403): retrying cannot help."""


class Sink(Protocol):
    def send(self, events: list[Event]) -> int:
        """Store ``events`` atomically; return how many were already stored (re-sends).

        Raises ``StoreUnavailable`` for a transient failure, ``CausewayError`` for a 4xx."""
        ...


class StoreSink:
    """Posts through ``ingest.client`` (one batch request per call)."""

    def __init__(self, client: CausewayClient) -> None:
        self._client = client

    def send(self, events: list[Event]) -> int:
        try:
            results = self._client.post_batch(events)
        except httpx2.TransportError as exc:
            raise StoreUnavailable(f"store unreachable: {exc}") from exc
        except CausewayError as exc:
            if exc.status >= 500 or exc.status in _TRANSIENT:
                raise StoreUnavailable(str(exc)) from exc
            raise
        return sum(1 for r in results if r.duplicate)


class NdjsonSink:
    """Writes events as NDJSON lines instead of posting them (``--out``)."""

    def __init__(self, file: TextIO) -> None:
        self._file = file

    def send(self, events: list[Event]) -> int:
        self._file.write("".join(orjson.dumps(e).decode() + "\n" for e in events))
        self._file.flush()
        return 0


@dataclass(slots=True)
class OutputStats:
    queued: int = 0
    sent: int = 0
    duplicates: int = 0
    spooled: int = 0
    rejected: int = 0
    rejected_not_kept: int = 0
    """Rejects past the spool's ``max_rejected_bytes``: logged, not written."""
    dropped: int = 0


@dataclass(frozen=True, slots=True)
class OutputConfig:
    soon_interval_s: float = 0.5
    lazy_interval_s: float = 2.0
    max_batch_events: int = 500
    retry_min_s: float = 0.5
    retry_max_s: float = 30.0
    on_full: OnFull = "wait"


class Output:
    """The queue between the pipeline and the store. Not thread-safe: one owner thread."""

    def __init__(
        self,
        sink: Sink,
        spool: Spool | None = None,
        config: OutputConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._sink = sink
        self._spool = spool
        self.config = config or OutputConfig()
        self.stats = OutputStats()
        self._clock = clock
        self._sleep = sleep
        self._pending: list[Event] = []
        self._due: float | None = None
        self._retry_at = 0.0
        self._retry_s = self.config.retry_min_s
        self._is_down = False
        self._warned_full_at = -1e9
        self._held = False
        self._refusal: StoreRefused | None = None  # met by a put, raised by what follows

    @property
    def is_down(self) -> bool:
        return self._is_down

    def put(self, event: Event, delivery: Delivery) -> None:
        self._pending.append(event)
        self.stats.queued += 1
        now = self._clock()
        wait_s = {
            Delivery.IMMEDIATE: 0.0,
            Delivery.SOON: self.config.soon_interval_s,
            Delivery.LAZY: self.config.lazy_interval_s,
        }[delivery]
        self._due = min(self._due, now + wait_s) if self._due is not None else now + wait_s
        if wait_s == 0.0 or len(self._pending) >= self.config.max_batch_events:
            try:
                self._flush()
            except StoreRefused as refused:
                # Not raised here, in the middle of the pipeline's emission: what it emits
                # after this goes to the spool too, and the next poll, flush or close
                # raises it.
                self._held = True
                self._refusal = refused

    def hold(self) -> None:
        """From now on, flush into the spool only (no spool: count the events as dropped)."""
        self._held = True

    def poll(self) -> None:
        """Flush when the oldest queued event's delay is up; retry the spool when due.
        Raises the ``StoreRefused`` a ``put`` met (the output holds since)."""
        self._raise_refused()
        now = self._clock()
        if self._due is not None and now >= self._due:
            self.flush()
        elif self._has_backlog() and now >= self._retry_at and not self._held:
            self._drain()

    def flush(self) -> None:
        """Send everything queued now (or spool it, behind what the spool holds)."""
        self._raise_refused()
        self._flush()

    def _raise_refused(self) -> None:
        refused, self._refusal = self._refusal, None
        if refused is not None:
            raise refused

    def _flush(self) -> None:
        events, self._pending, self._due = self._pending, [], None
        if self._held:
            if self._spool is None:
                self.stats.dropped += len(events)
            else:
                self._to_spool(events)
            return
        if self._has_backlog():
            self._to_spool(events)
            if self._clock() >= self._retry_at:
                self._drain()
            return
        size = self.config.max_batch_events
        for start in range(0, len(events), size):
            batch = events[start : start + size]
            try:
                self._send(batch)
            except StoreUnavailable as exc:
                self._went_down(exc)
                self._to_spool(events[start + exc.done :])
                return
            except StoreRefused:
                self._to_spool(events[start:])
                raise

    def close(self, *, drain_timeout_s: float = 0.0) -> None:
        """Flush, and try to empty the spool for up to ``drain_timeout_s``; the spool is
        then closed (its lock released), whatever happens."""
        try:
            self._flush()
            self._raise_refused()
            deadline = self._clock() + drain_timeout_s
            while self._has_backlog() and self._clock() < deadline and not self._held:
                self._sleep(max(0.0, min(self._retry_at, deadline) - self._clock()))
                self._drain()
        finally:
            if self._spool is not None:
                self._spool.close()

    def _has_backlog(self) -> bool:
        return self._spool is not None and not self._spool.is_empty

    def _drain(self) -> None:
        spool = self._spool
        if spool is None:
            return
        while True:
            batch = spool.read_batch(self.config.max_batch_events)
            if not batch.events:
                return
            try:
                self._send(batch.events)
            except StoreUnavailable as exc:
                if exc.done:
                    spool.commit(batch.cursors[exc.done - 1])
                self._went_down(exc)
                return
            spool.commit(batch.cursors[-1])
            if self._is_down:
                log.warning("store reachable again: sending the spooled events")
                self._is_down = False
            self._retry_s = self.config.retry_min_s

    def _send(self, batch: list[Event]) -> None:
        try:
            self.stats.duplicates += self._sink.send(batch)
        except CausewayError as exc:
            self._refused(exc)
            self._send_one_by_one(batch)
            return
        self.stats.sent += len(batch)

    def _send_one_by_one(self, batch: list[Event]) -> None:
        for index, event in enumerate(batch):
            try:
                self.stats.duplicates += self._sink.send([event])
            except StoreUnavailable as exc:
                raise StoreUnavailable(str(exc), done=index) from exc
            except CausewayError as exc:
                self._refused(exc)
                self._reject(event, exc)
                continue
            self.stats.sent += 1

    def _refused(self, exc: CausewayError) -> None:
        if exc.status in (401, 403):
            raise StoreRefused(f"the store refuses this key: {exc}") from exc
        kind = exc.problem.get("type")
        if exc.status in (404, 405) or not str(kind or "").startswith("/problems/"):
            raise StoreRefused(
                f"the target does not take events like a Causeway store ({exc}): is --target right?"
            ) from exc

    def _reject(self, event: Event, exc: CausewayError) -> None:
        self.stats.rejected += 1
        where = "kept nowhere (no spool)"
        if self._spool is not None:
            where = f"kept in {self._spool.directory}"
            if not self._spool.reject(event, exc.status, exc.problem):
                self.stats.rejected_not_kept += 1
                where = f"not kept: {self._spool.directory}/rejected.ndjson is at its cap"
        log.error("store rejected event %s (%s); %s", event.get("id"), exc, where)

    def _went_down(self, exc: StoreUnavailable) -> None:
        if self._spool is None:
            raise exc
        if not self._is_down:
            log.warning("store unavailable (%s): spooling events to %s", exc, self._spool.directory)
        self._is_down = True
        self._retry_at = self._clock() + self._retry_s
        self._retry_s = min(self._retry_s * 2, self.config.retry_max_s)

    def _to_spool(self, events: list[Event]) -> None:
        spool = self._spool
        if not events:
            return
        if spool is None:
            raise StoreUnavailable("the store is unavailable and there is no spool")
        while True:
            try:
                spool.append(events)
            except SpoolFull as exc:
                if self.config.on_full == "drop":
                    self.stats.dropped += len(events)
                    log.warning(
                        "%s: dropped %d events (%d dropped so far)",
                        exc,
                        len(events),
                        self.stats.dropped,
                    )
                    return
                self._wait_for_room(exc)
                continue
            self.stats.spooled += len(events)
            return

    def _wait_for_room(self, exc: SpoolFull) -> None:
        now = self._clock()
        if now - self._warned_full_at >= 10.0:
            log.warning("%s: waiting for the store before reading more input", exc)
            self._warned_full_at = now
        self._sleep(max(0.0, self._retry_at - now))
        self._drain()
