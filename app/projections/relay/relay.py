"""The relay: publish every event to JetStream, in position order, exactly once.

How a message gets in once, and in order (docs/relay.md has the long form):

- Each message carries ``Nats-Msg-Id: <tenant>:<position>`` and
  ``Nats-Expected-Last-Msg-Id``: the id of the message the relay sent before it. The
  stream refuses a message whose predecessor is not its last one, so a message that
  failed (a leader election, a node gone) takes every later one with it: the stream
  always holds a prefix of what the relay sends, never one with a hole. A session's
  first message expects the stream's last sequence instead (``Nats-Expected-Last-Sequence``):
  JetStream keeps the last message's id in memory only, and after a restart knows it
  again only when that message is inside the duplicate window; the sequence it keeps
  on disk.
- Publishing is pipelined: up to ``max_pending`` acknowledgements in flight, across
  batches, and the log is read a batch ahead of the publisher. The checkpoint (``log``)
  moves to a batch's end once every ack of it, and of every batch before it, has come.
- Anything wrong (no ack within ``ack_timeout_s``, a refused publish, NATS unreachable)
  ends the session: the connection is closed, and the next session resumes from the
  stream's last message (a message of the relay names its position) or the checkpoint,
  whichever is further. A message that landed after that look is published again; the
  stream's duplicate window (at least twice the ack timeout) drops it.
- One relay leads per stream (``log.leadership``); others wait for the lead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import nats
import nats.errors
import nats.js.errors
import psycopg
from nats.js import JetStreamContext
from nats.js.api import PubAck, RawStreamMsg, StreamConfig
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.projections import checkpoints
from app.projections.leadership import Leadership
from app.projections.relay import log
from app.projections.relay.messages import (
    EventTooLarge,
    Mode,
    check_size,
    hash_of,
    headers_and_payload,
)
from app.projections.relay.subjects import PREFIX, Tenants, msg_id, position_of, subject_for
from app.store.append.writes import NOTIFY_CHANNEL
from app.store.log import read_hash_at
from app.telemetry import tracing
from app.telemetry.batch_spans import publish_span

logger = logging.getLogger(__name__)
SUBJECTS = f"{PREFIX}.>"
_NATS_ERRORS = (nats.errors.Error, TimeoutError, OSError)
# A subject's bytes at most: what fits nats-server's default max_control_line (4096) with
# the rest of an HPUB line. A longer one made the server reset the connection, every try.
MAX_SUBJECT_BYTES = 4000
# How many sequences before a removed last message a session's start looks at for the
# last one still stored (one request each).
_LOOK_BACK = 256


class PublishRefused(Exception):
    """JetStream answered a publish with an error (the ack future never resolves then:
    nats-py reports the error to the connection's error callback instead)."""


# JetStream's error code for a stream whose subjects another stream takes.
_SUBJECTS_OVERLAP = 10065


class StreamMisconfigured(Exception):
    pass


_SESSION_ERRORS = (*_NATS_ERRORS, PublishRefused, StreamMisconfigured, EventTooLarge)


@dataclass(frozen=True, slots=True)
class RelayConfig:
    servers: Sequence[str]
    stream: str = "CAUSEWAY"
    replicas: int = 1
    tenants: Tenants = field(default_factory=Tenants)
    mode: Mode = "structured"
    duplicate_window_s: float = 120.0
    ack_timeout_s: float = 5.0
    max_pending: int = 4000
    batch_events: int = 10_000
    batch_bytes: int = 16 << 20
    poll_interval_s: float = 1.0
    max_backoff_s: float = 5.0


class NatsRelay:
    def __init__(
        self, engine: AsyncEngine, config: RelayConfig, *, listen_dsn: str | None = None
    ) -> None:
        self._engine = engine
        self.config = config
        self._listen_dsn = listen_dsn
        self._name = log.checkpoint_name(config.stream)
        self._wake = asyncio.Event()
        self._refused = asyncio.Event()
        self._logged: dict[str, float] = {}
        self._checkpoints_moved = 0

    async def dispose(self) -> None:
        await self._engine.dispose()

    async def run(self) -> None:
        """Lead (or stand by for) the relay until cancelled."""
        async with asyncio.TaskGroup() as group:
            if self._listen_dsn:
                group.create_task(self._listen(self._listen_dsn))
            group.create_task(self._follow())

    async def _follow(self) -> None:
        while True:
            try:
                async with log.leadership(self._engine, self._name) as lead:
                    if lead is not None:
                        logger.info("relay to %s: leading", self.config.stream)
                        await self._lead(lead)
            except (DBAPIError, psycopg.OperationalError) as exc:
                logger.warning("relay: database unavailable: %s", exc)
            except Exception:
                logger.exception("relay: unexpected failure")
            await asyncio.sleep(self.config.poll_interval_s)

    async def _lead(self, lead: Leadership) -> None:
        backoff_s = 0.1
        while True:
            await lead.confirm()
            moved = self._checkpoints_moved
            try:
                await self._session(lead)
            except _SESSION_ERRORS as exc:
                self._log_once(f"relay to {self.config.stream}: {_describe(exc)}; retrying")
            # A session that got somewhere starts the backoff over.
            backoff_s = 0.1 if self._checkpoints_moved > moved else backoff_s * 2
            backoff_s = min(backoff_s, self.config.max_backoff_s)
            await asyncio.sleep(backoff_s)

    async def _session(self, lead: Leadership) -> None:
        """Connect, make sure of the stream, and publish until something fails."""
        self._refused.clear()
        nc = await nats.connect(
            servers=list(self.config.servers),
            connect_timeout=2,
            reconnect_time_wait=0.5,
            max_reconnect_attempts=-1,
            error_cb=self._on_error,
            disconnected_cb=self._on_disconnected,
            name="causeway-relay",
        )
        try:
            js = nc.jetstream(
                timeout=self.config.ack_timeout_s, publish_async_max_pending=self.config.max_pending
            )
            await self._ensure_stream(js)
            start, first = await self._resume(js)
            found: asyncio.Queue[tuple[int, list[log.Relayed]]] = asyncio.Queue(maxsize=1)
            batches: asyncio.Queue[tuple[int, list[asyncio.Future[PubAck]]]] = asyncio.Queue(
                maxsize=max(2, self.config.max_pending // self.config.batch_events + 1)
            )
            async with asyncio.TaskGroup() as group:
                group.create_task(self._read_ahead(lead, start, found))
                group.create_task(self._publish(js, first, found, batches, nc.max_payload))
                group.create_task(self._acknowledge(batches))
        except* _SESSION_ERRORS as failed:
            raise failed.exceptions[0] from None
        except* (DBAPIError, psycopg.OperationalError) as failed:
            raise failed.exceptions[0] from None  # the lead ends (``_follow``)
        finally:
            with contextlib.suppress(*_NATS_ERRORS):
                await asyncio.wait_for(nc.close(), 2)

    async def _ensure_stream(self, js: JetStreamContext) -> None:
        """Create the stream if absent; refuse one that does not take the relay's subjects."""
        try:
            info = await js.stream_info(self.config.stream)
        except nats.js.errors.NotFoundError:
            try:
                await js.add_stream(
                    StreamConfig(
                        name=self.config.stream,
                        subjects=[SUBJECTS],
                        num_replicas=self.config.replicas,
                        duplicate_window=self.config.duplicate_window_s,
                    )
                )
            except nats.js.errors.BadRequestError as refused:
                if refused.err_code != _SUBJECTS_OVERLAP:
                    raise
                raise StreamMisconfigured(
                    f"another stream of this NATS account takes {SUBJECTS}: delete it, or "
                    f"remove {SUBJECTS} from it, before relaying to {self.config.stream} "
                    "(docs/relay.md)"
                ) from None
            logger.info(
                "relay: created stream %s (%s, %d replicas, duplicate window %.0f s)",
                self.config.stream,
                SUBJECTS,
                self.config.replicas,
                self.config.duplicate_window_s,
            )
            return
        if SUBJECTS not in (info.config.subjects or []):
            raise StreamMisconfigured(
                f"stream {self.config.stream} does not take {SUBJECTS} "
                f"(its subjects: {info.config.subjects})"
            )
        window = info.config.duplicate_window or 0
        if window < 2 * self.config.ack_timeout_s:
            logger.warning(
                "relay: stream %s keeps message ids for %.1f s, under twice the ack timeout",
                self.config.stream,
                window,
            )

    async def _resume(self, js: JetStreamContext) -> tuple[int, dict[str, str]]:
        """Where to start: past the checkpoint and past the stream's last message (the
        stream holds a prefix of what the relay sent, so everything up to it is in);
        and the headers that chain the first message to the stream as it was looked at:
        its last sequence, which JetStream keeps on disk. (Its last message id would do
        only while that message is inside the duplicate window: a server restarted
        after a quiet spell knows no last id, and would refuse every session's first
        message for good.)"""
        async with self._engine.begin() as conn:
            checkpoint = await log.read_checkpoint(conn, self._name)
        info = await js.stream_info(self.config.stream)
        last_seq = info.state.last_seq or 0
        first = {"Nats-Expected-Last-Sequence": str(last_seq)} if last_seq else {}
        found = None
        if info.state.messages:
            found = await self._last_message(js, last_seq, info.state.first_seq or 1)
        if found is None:  # purged, or new: nothing tells a position
            await self._warn_if_missing(None, checkpoint)
            return checkpoint, first
        position = position_of((found.headers or {}).get("Nats-Msg-Id"))
        if position is not None:
            await self._check_same_log(position, found)
        logger.info(
            "relay: checkpoint at %d, the stream's last message at %s; resuming past both",
            checkpoint,
            f"position {position}" if position is not None else "no position of ours",
        )
        if position is not None and position > checkpoint:
            async with self._engine.begin() as conn:
                await log.advance(conn, self._name, position)
            return position, first
        if position is not None:
            await self._warn_if_missing(position, checkpoint)
        return checkpoint, first

    async def _check_same_log(self, position: int, found: RawStreamMsg) -> None:
        """Refuse a stream whose last message is not the log's event at its position: the
        store was restored to an earlier point (positions are given again, to other
        events), or the stream holds another store's. Resumed past it, the relay would
        skip every event the log holds up to there."""
        async with self._engine.connect() as conn:
            stored = await read_hash_at(conn, position)
        sent = hash_of(found.headers or {}, found.data or b"")
        if stored is not None and (sent is None or sent == stored):
            return
        why = "past the log's head" if stored is None else "another event than the log's there"
        raise StreamMisconfigured(
            f"stream {self.config.stream}'s last message is at position {position}, {why}: "
            "the store was restored to an earlier point, or the stream holds another "
            "store's events; the relay publishes nothing onto it (purge the stream, or "
            "delete it and give the relay another: docs/relay.md)"
        )

    async def _last_message(
        self, js: JetStreamContext, last_seq: int, first_seq: int
    ) -> RawStreamMsg | None:
        """The stream's last message still stored: at ``last_seq``, unless it was removed
        (a purge of some subjects, a deleted message, a stream that drops acknowledged
        ones), then the latest of the ``_LOOK_BACK`` before it that is still there; None
        when the stream holds none of them."""
        for seq in range(last_seq, max(first_seq, last_seq - _LOOK_BACK, 1) - 1, -1):
            try:
                return await js.get_msg(self.config.stream, seq=seq)
            except nats.js.errors.NotFoundError:
                continue
        return None

    async def _warn_if_missing(self, position: int | None, checkpoint: int) -> None:
        """Warn when the stream ends (at ``position``; None: no message of ours) before an
        event the relay sent: past its end, the checkpoint also passed events it left out
        on purpose (CAUSEWAY_NATS_TENANTS), which are not missing."""
        if checkpoint <= (position or 0):
            return
        async with self._engine.connect() as conn:
            between = await log.read_batch(
                conn, position or 0, checkpoint, 1, 1, self.config.tenants
            )
        if between.events:
            self._warn_missing(position, checkpoint)

    def _warn_missing(self, position: int | None, checkpoint: int) -> None:
        logger.warning(
            "relay: stream %s ends at %s, its checkpoint is %d: events between are not in it "
            "(was the stream purged, or deleted and re-created?)",
            self.config.stream,
            "no message of ours" if position is None else f"position {position}",
            checkpoint,
        )

    async def _read_ahead(
        self, lead: Leadership, after: int, found: asyncio.Queue[tuple[int, list[log.Relayed]]]
    ) -> None:
        """Read the log a batch ahead of the publisher: the next batch's query runs while
        the one before is sent."""
        config = self.config
        while True:
            async with self._engine.connect() as conn:
                head = await checkpoints.read_head(conn)
                read = await log.read_batch(
                    conn, after, head, config.batch_events, config.batch_bytes, config.tenants
                )
            batch = read.events
            reached = batch[-1].position if read.more else head
            if reached <= after:
                await self._wait()
                await lead.confirm()  # idle: is this relay still the leader?
                continue
            await found.put((reached, batch))
            after = reached

    async def _publish(
        self,
        js: JetStreamContext,
        first: dict[str, str],
        found: asyncio.Queue[tuple[int, list[log.Relayed]]],
        batches: asyncio.Queue[tuple[int, list[asyncio.Future[PubAck]]]],
        max_payload: int,
    ) -> None:
        """Publish what ``_read_ahead`` finds, each message chained to the one before it
        (the first to the stream as ``_resume`` found it, by ``first``)."""
        config = self.config
        expected: str | None = None
        while True:
            reached, batch = await found.get()
            span = publish_span(config.stream, len(batch)) if tracing.on else None
            try:
                acks, expected = await self._send(js, batch, first, expected, max_payload)
            except BaseException as failed:  # the batch an operator looks for: in the trace
                if span is not None:
                    tracing.end_failed(span, failed)
                raise
            if span is not None:
                span.end()
            await batches.put((reached, acks))

    async def _send(
        self,
        js: JetStreamContext,
        batch: list[log.Relayed],
        first: dict[str, str],
        expected: str | None,
        max_payload: int,
    ) -> tuple[list[asyncio.Future[PubAck]], str | None]:
        """Publish ``batch``, each message chained to the one before (``expected``, the
        id of the last one sent; None: the first of the session, chained by ``first``);
        its acknowledgements to come, and the id of its last message."""
        config = self.config
        acks = []
        for event in batch:
            headers, payload = headers_and_payload(event.document, config.mode)
            headers["Nats-Msg-Id"] = this = msg_id(event.tenant, event.position)
            if expected is not None:
                headers["Nats-Expected-Last-Msg-Id"] = expected
            else:
                headers.update(first)
            # With the headers: in binary mode every attribute is one, percent-encoded;
            # and the one nats-py adds for ``stream=`` below.
            sent = {**headers, "Nats-Expected-Stream": config.stream}
            check_size(event.position, payload, sent, max_payload)
            subject = subject_for(event.tenant, event.type)
            if len(subject) > MAX_SUBJECT_BYTES:
                raise _subject_too_long(event.position, subject)
            try:
                # With max_pending acks awaited, a slot frees as one comes: none may come
                # (the server died with them), and nats-py would wait for ever.
                ack = await js.publish_async(
                    subject,
                    payload,
                    headers=headers,
                    stream=config.stream,
                    wait_stall=config.ack_timeout_s,
                )
            except nats.js.errors.TooManyStalledMsgsError as stalled:
                if isinstance(stalled.__context__, asyncio.CancelledError):
                    # nats-py's name for a wait cancelled: the service is stopping, and
                    # a session error here would start the next session instead.
                    raise asyncio.CancelledError from None
                raise TimeoutError(
                    f"no ack within {config.ack_timeout_s} s with {config.max_pending} awaited"
                ) from None
            acks.append(ack)
            expected = this
        return acks, expected

    async def _acknowledge(
        self, batches: asyncio.Queue[tuple[int, list[asyncio.Future[PubAck]]]]
    ) -> None:
        while True:
            reached, acks = await batches.get()
            if acks:
                await self._all_acked(acks)
            async with self._engine.begin() as conn:
                await log.advance(conn, self._name, reached)
            self._checkpoints_moved += 1

    async def _all_acked(self, acks: list[asyncio.Future[PubAck]]) -> None:
        every = asyncio.gather(*acks)
        refused = asyncio.ensure_future(self._refused.wait())
        waiting: set[asyncio.Future[Any]] = {every, refused}
        try:
            done, _ = await asyncio.wait(
                waiting,
                timeout=self.config.ack_timeout_s,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            refused.cancel()
        if every in done:
            every.result()
            return
        every.cancel()
        # Its acks may still fail as the session's connection closes: that is the
        # session's end, told once by ``_lead``, not an error for asyncio to log.
        every.add_done_callback(_retrieved)
        if refused in done:
            raise PublishRefused("JetStream refused a publish")
        raise TimeoutError(f"no ack within {self.config.ack_timeout_s} s")

    async def _wait(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), self.config.poll_interval_s)
        self._wake.clear()

    async def _listen(self, dsn: str) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    async for _ in conn.notifies():
                        self._wake.set()
            except (psycopg.Error, OSError) as exc:
                logger.warning("relay: LISTEN lost (%s); polling meanwhile", exc)
            await asyncio.sleep(self.config.poll_interval_s)

    async def _on_error(self, exc: Exception) -> None:
        if isinstance(exc, nats.js.errors.APIError):
            self._refused.set()
        self._log_once(f"relay: NATS: {_describe(exc)}")

    async def _on_disconnected(self) -> None:
        self._log_once("relay: disconnected from NATS")

    def _log_once(self, line: str) -> None:
        """Log ``line`` unless it was logged less than 10 s ago: an unreachable server,
        or an event the relay cannot pass, is reported once in a while, not on every try."""
        now = time.monotonic()
        if now - self._logged.get(line, -1e9) > 10:
            logger.warning("%s", line)
            self._logged = {k: v for k, v in self._logged.items() if now - v <= 10}
            self._logged[line] = now


def _subject_too_long(position: int, subject: str) -> EventTooLarge:
    return EventTooLarge(
        f"the event at position {position} makes a subject of {len(subject)} bytes (its type, "
        f"percent-encoded), over the {MAX_SUBJECT_BYTES} that fit a NATS server's control "
        "line (max_control_line, 4096 bytes by default); keep CAUSEWAY_MAX_ATTRIBUTES_BYTES "
        "at 1300 or less with the relay (docs/relay.md)"
    )


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".rstrip(": ") if str(exc) else type(exc).__name__
