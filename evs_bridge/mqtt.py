"""Live input over MQTT: one topic per sensor, packets in a small documented binary format.

The packet format is ``evs_bridge.packets`` (re-exported here).

A gap in the sequence is counted (``stats.gaps``) and logged; a packet whose sequence
repeats or goes back (not to 0), or the session's packet 0 delivered again (QoS 1 delivers
at least once), is dropped and counted (``stats.stale``): the latter only while the
session's sequence is below ``_REDELIVERY_PACKETS`` (a publisher resends at most its
in-flight window); later, the same bytes are the same recording published again, a new
stream. A restart of the stream, a sequence going back to 0 or (sensor clock)
``jump_confirm_events`` consecutive events more than the pipeline's ``jump_us`` behind the
newest one, finishes the old pipeline (its segments are emitted) and starts a new one with a
new session key (``stats.restarts``), and a fresh EVT 3.0 decoder; fewer such events are
outliers, dropped and counted (``stats.outliers``), so one flipped timestamp does not
restart the stream. A packet that cannot be processed (a bad header, flags not 0, a geometry
above ``MAX_SIDE_PX`` or other than the stream's or the pinned one, or any error while
decoding or running the pipeline on it) is dropped and counted (``stats.bad``), and logged
once per ``_LOG_EVERY``; it never stops the worker. Events outside the header's geometry are
dropped and counted by the pipeline (``stats.out_of_geometry``). The segments' ``dataref``
is the topic with a range of sequence numbers.

Threads: paho's network loop thread only decodes the header check and enqueues the
payload on a bounded queue (``queue_packets``); when the queue is full the packet is
dropped, counted in ``stats.dropped`` and logged. A worker thread decodes, runs the
pipeline and does all HTTP (``Output``), so a slow or absent store never stalls the
network loop. ``stop`` never blocks: it stops the network loop, lets the worker process
what is queued, then finishes the pipeline and closes the output (into the spool when the
store is away or refused the key). paho reconnects with backoff (1 s to 30 s) after a
broker restart and ``on_connect`` subscribes again every time; the session is clean, so
packets published while the bridge is disconnected are not delivered (QoS 1 while
connected).

The live session's ``<recording>`` key (in every id, see ``evs_bridge.lineage``) is the UTC
time of the session's first packet, ``YYYYmmddTHHMMSSZ`` (``.1``, ``.2``... appended when a
restart falls in the same second): live data is never replayed, and the spool keeps the
ids of events already made.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from paho.mqtt.client import Client, ConnectFlags, DisconnectFlags, MQTTMessage
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from evs_bridge.decoders import Evt3Decoder
from evs_bridge.events import EVENT_DTYPE, MAX_SIDE_PX, ClockDomain, EventChunk, Events
from evs_bridge.lineage import SourceRef
from evs_bridge.output import Output, StoreRefused, StoreUnavailable
from evs_bridge.packets import (
    HEADER,
    MAGIC,
    VERSION,
    BadPacket,
    Encoding,
    Packet,
    decode_packet,
    encode_evt3_packet,
    encode_packet,
)
from evs_bridge.pipeline import Pipeline
from evs_bridge.replay import BridgeSettings, build_pipeline
from evs_bridge.spool import SpoolCorrupt

__all__ = [
    "HEADER",
    "MAGIC",
    "MAX_SIDE_PX",
    "VERSION",
    "BadPacket",
    "Broker",
    "Encoding",
    "MqttBridge",
    "MqttStats",
    "Packet",
    "decode_packet",
    "encode_evt3_packet",
    "encode_packet",
    "send_packets",
]

log = logging.getLogger(__name__)

_LOG_EVERY = 100
# A publisher that reconnects resends what was not acknowledged: paho keeps 20 messages in
# flight by default. Packet 0 byte for byte while a session is this young is such a copy.
_REDELIVERY_PACKETS = 64


@dataclass(frozen=True, slots=True)
class Broker:
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> Broker:
        """``mqtt://host:port``, ``host:port`` or ``host`` (port 1883)."""
        parts = urlsplit(url if "://" in url else f"mqtt://{url}")
        if parts.scheme not in ("mqtt", "tcp") or not parts.hostname:
            raise ValueError(f"broker {url!r} is not mqtt://host[:port]")
        return cls(parts.hostname, parts.port or 1883)

    def __str__(self) -> str:
        return f"mqtt://{self.host}:{self.port}"


@dataclass(slots=True)
class MqttStats:
    received: int = 0
    processed: int = 0
    dropped: int = 0
    bad: int = 0
    gaps: int = 0
    stale: int = 0
    restarts: int = 0
    connects: int = 0
    triggers: int = 0
    out_of_geometry: int = 0
    outliers: int = 0


class _StepsBack:
    """Tells a sensor that restarted from a wild timestamp. An event more than the
    pipeline's ``jump_us`` behind the newest one is dropped (an outlier, e.g. a flipped
    bit), unless ``confirm`` consecutive events, across packets, agree on going back
    (each within ``jump_us`` of the first): then the stream restarts at the confirming
    run's first event in the packet at hand. Earlier packets' part of that run is lost,
    as with a jump ahead (``evs_bridge.pipeline``)."""

    def __init__(self, confirm: int) -> None:
        self._confirm = confirm
        self.dropped = 0  # outliers, over every session
        self.reset()

    def reset(self) -> None:
        self._run = 0  # consecutive events behind, up to the last packet's end
        self._first = 0  # the time of the run's first event

    def split(
        self, t: np.ndarray, newest: int, jump_us: int
    ) -> tuple[np.ndarray | None, int | None]:
        """Which events of ``t`` the session keeps (None: all), and the index at which the
        stream restarts (None: it does not; the events before it are the session's)."""
        behind = t < newest - jump_us
        if not behind.any():
            self._run = 0
            return None, None
        start = int(np.flatnonzero(behind)[0])
        run, first, run_start = (self._run, self._first, 0) if start == 0 else (0, 0, start)
        for i in range(start, len(t)):
            if not behind[i]:
                run = 0
                continue
            value = int(t[i])
            if run == 0 or abs(value - first) > jump_us:
                run, first, run_start = 0, value, i
            run += 1
            if run >= self._confirm:
                self.reset()
                kept = ~behind[:run_start]
                self.dropped += run_start - int(np.count_nonzero(kept))
                return kept, run_start
        self._run, self._first = run, first
        self.dropped += int(np.count_nonzero(behind))
        return ~behind, None


class MqttBridge:
    """Subscribes to one sensor's topic and runs its pipeline on a worker thread."""

    def __init__(
        self,
        broker: Broker,
        topic: str,
        sensor: str,
        output: Output,
        *,
        settings: BridgeSettings | None = None,
        queue_packets: int = 1024,
        client_id: str = "",
        width: int | None = None,
        height: int | None = None,
    ) -> None:
        if not topic or "+" in topic or "#" in topic:
            raise ValueError(f"topic {topic!r} must be one sensor's topic, without + or #")
        if (width is None) != (height is None):
            raise ValueError("give both width and height, or neither")
        self.broker = broker
        self.topic = topic
        self.sensor = sensor
        self.output = output
        self.stats = MqttStats()
        self.subscribed = threading.Event()
        self._settings = settings or BridgeSettings()
        self._pinned = None if width is None or height is None else (width, height)
        self._queue: queue.Queue[bytes] = queue.Queue(maxsize=queue_packets)
        self._stopping = threading.Event()
        self._client = Client(CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=True)
        self._client.reconnect_delay_set(min_delay=1, max_delay=30)
        self._client.on_connect = self._on_connect
        self._client.on_subscribe = self._on_subscribe
        self._client.on_disconnect = self._on_disconnect
        self._client.on_message = self._on_message
        self._worker = threading.Thread(target=self._work, name=f"evs-{sensor}", daemon=True)
        self._pipeline: Pipeline | None = None
        self._geometry: tuple[int, int, ClockDomain] | None = None
        self._decoder: Evt3Decoder | None = None
        self._next_sequence: int | None = None
        self._session: str | None = None
        self._earlier = (0, 0)  # out-of-geometry and outlier counts of finished pipelines
        self._behind = _StepsBack(self._settings.pipeline.jump_confirm_events)
        self._first_packet: bytes | None = None  # this session's packet 0, as received
        self._failure: BaseException | None = None

    @property
    def failure(self) -> BaseException | None:
        """What stopped the worker early (the store refusing the key), else None."""
        return self._failure

    def start(self) -> None:
        self._worker.start()
        self._client.connect_async(self.broker.host, self.broker.port, keepalive=30)
        self._client.loop_start()

    def stop(self, *, drain_timeout_s: float = 0.0) -> None:
        """Disconnect, process what is queued, finish the pipeline and close the output
        (retrying its spool for up to ``drain_timeout_s``). Never blocks on the queue."""
        self._client.disconnect()
        self._client.loop_stop()
        self._stopping.set()
        if self._worker.is_alive():
            self._worker.join()
        elif self._worker.ident is None:
            self._work()  # never started: process what was queued here
        if self._failure is not None:
            self.output.hold()
        try:
            self._finish_pipeline()
            self.output.close(drain_timeout_s=drain_timeout_s)
        except (StoreRefused, StoreUnavailable) as exc:
            if self._failure is None:
                self._failure = exc
            self.output.hold()
            self.output.close()

    def _on_connect(
        self,
        client: Client,
        _userdata: Any,
        _flags: ConnectFlags,
        reason_code: ReasonCode,
        _properties: Properties | None,
    ) -> None:
        if reason_code.is_failure:
            log.warning("broker %s refused the connection: %s", self.broker, reason_code)
            return
        self.stats.connects += 1
        log.info("connected to %s; subscribing to %s", self.broker, self.topic)
        client.subscribe(self.topic, qos=1)

    def _on_subscribe(
        self,
        _client: Client,
        _userdata: Any,
        _mid: int,
        reason_codes: list[ReasonCode],
        _properties: Properties | None,
    ) -> None:
        if any(code.is_failure for code in reason_codes):
            log.error("broker %s refused the subscription to %s", self.broker, self.topic)
            return
        self.subscribed.set()

    def _on_disconnect(
        self,
        _client: Client,
        _userdata: Any,
        _flags: DisconnectFlags,
        reason_code: ReasonCode,
        _properties: Properties | None,
    ) -> None:
        self.subscribed.clear()
        if reason_code.is_failure:
            log.warning("lost %s (%s); reconnecting", self.broker, reason_code)

    def _on_message(self, _client: Client, _userdata: Any, message: MQTTMessage) -> None:
        self.submit(bytes(message.payload))

    def submit(self, payload: bytes) -> None:
        """Queue one packet for the worker, or drop and count it when the queue is full
        (what the network loop does with each message; never blocks)."""
        self.stats.received += 1
        try:
            self._queue.put_nowait(payload)
        except queue.Full:
            self.stats.dropped += 1
            log.warning(
                "%s: packet queue full, dropped a packet (%d dropped so far)",
                self.topic,
                self.stats.dropped,
            )

    def _work(self) -> None:
        while True:
            try:
                item: bytes | None = self._queue.get(timeout=0.1)
            except queue.Empty:
                if self._stopping.is_set():
                    return
                item = None
            try:
                if item is not None:
                    self._process_safely(item)
                self.output.poll()
            except (StoreRefused, StoreUnavailable, SpoolCorrupt) as exc:
                # Retrying cannot help: keep processing what comes, into the spool only,
                # until the owner sees ``failure`` and stops the bridge. (A changed spool
                # line stops every later read of the spool the same way.)
                if self._failure is None:
                    self._failure = exc
                    log.error("the %s bridge stops: %s", self.sensor, exc)
                self.output.hold()

    def _process_safely(self, data: bytes) -> None:
        try:
            self._process(data)
        except (StoreRefused, StoreUnavailable, SpoolCorrupt):
            raise
        except Exception as exc:  # one bad packet must not stop the bridge
            self._bad(f"{type(exc).__name__}: {exc}")

    def _bad(self, why: str) -> None:
        self.stats.bad += 1
        if self.stats.bad == 1 or self.stats.bad % _LOG_EVERY == 0:
            log.warning(
                "%s: dropped a bad packet (%d so far; one in %d is logged): %s",
                self.topic,
                self.stats.bad,
                _LOG_EVERY,
                why,
            )

    def _process(self, data: bytes) -> None:
        try:
            packet = decode_packet(data)
        except BadPacket as exc:
            self._bad(str(exc))
            return
        expected = self._next_sequence
        if expected is not None and packet.sequence != expected:
            if (
                packet.sequence == 0
                and expected <= _REDELIVERY_PACKETS
                and data == self._first_packet
            ):
                # QoS 1 delivers at least once: a publisher that reconnects sends what was
                # not acknowledged again, at most its in-flight window. Later, the same
                # bytes are the same recording published again: a new stream.
                self.stats.stale += 1
                log.warning("%s: packet 0 delivered again: dropped", self.topic)
                return
            if packet.sequence == 0:
                self._restart("sequence restarted at 0")
            elif packet.sequence > expected:
                self.stats.gaps += packet.sequence - expected
                log.warning(
                    "%s: %d packets missing before %d",
                    self.topic,
                    packet.sequence - expected,
                    packet.sequence,
                )
            else:
                self.stats.stale += 1
                log.warning(
                    "%s: packet %d repeats or goes back (expected %d): dropped",
                    self.topic,
                    packet.sequence,
                    expected,
                )
                return
        self._next_sequence = packet.sequence + 1
        if packet.sequence == 0:
            self._first_packet = data
        pipeline = self._pipeline_for(packet)
        if pipeline is None:
            return
        events = self._events(packet)
        chunk = (packet.sequence, packet.sequence + 1)
        newest = pipeline.stats.newest_us
        if packet.clock is ClockDomain.SENSOR and newest is not None and len(events):
            kept, restart_at = self._behind.split(events["t"], newest, pipeline.jump_us)
            if restart_at is not None:
                pipeline.feed(EventChunk(events[:restart_at][kept], *chunk))
                self._restart(
                    f"sensor time went back from {newest} to {int(events['t'][restart_at])} µs"
                )
                pipeline = self._pipeline_for(packet)
                if pipeline is None:
                    return
                events = events[restart_at:]
            elif kept is not None:
                events = events[kept]
        pipeline.feed(EventChunk(events, *chunk))
        self.stats.out_of_geometry = self._earlier[0] + pipeline.stats.out_of_geometry
        self.stats.outliers = self._earlier[1] + pipeline.stats.outliers + self._behind.dropped
        self.stats.processed += 1

    def _restart(self, why: str) -> None:
        log.warning("%s: %s: the stream restarts with a new session", self.topic, why)
        self.stats.restarts += 1
        self._finish_pipeline()
        self._decoder = None
        self._behind.reset()
        self._first_packet = None

    def _finish_pipeline(self) -> None:
        pipeline, self._pipeline, self._geometry = self._pipeline, None, None
        if pipeline is not None:
            self._earlier = (
                self._earlier[0] + pipeline.stats.out_of_geometry,
                self._earlier[1] + pipeline.stats.outliers,
            )
            pipeline.finish()

    def _events(self, packet: Packet) -> Events:
        if packet.encoding == Encoding.PACKED:
            return np.frombuffer(packet.payload, dtype=EVENT_DTYPE).copy()
        if self._decoder is None:
            self._decoder = Evt3Decoder()
        events = self._decoder.decode(packet.payload)
        # Triggers are not bridged; taking them keeps the decoder's memory bounded.
        self.stats.triggers += len(self._decoder.take_triggers())
        return events

    def _new_session(self) -> str:
        key = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        previous = self._session
        if previous is not None and previous.split(".")[0] == key:
            number = int(previous.split(".")[1]) + 1 if "." in previous else 1
            key = f"{key}.{number}"
        self._session = key
        return key

    def _pipeline_for(self, packet: Packet) -> Pipeline | None:
        geometry = (packet.width, packet.height, packet.clock)
        if self._pinned is not None and geometry[:2] != self._pinned:
            self._bad(f"geometry {packet.width}x{packet.height} is not the pinned {self._pinned}")
            return None
        pipeline = self._pipeline
        if pipeline is None:
            source = SourceRef(
                uri=f"{self.broker}/{self.topic}",
                format="evt3" if packet.encoding == Encoding.EVT3 else "packed",
                offset_unit="sequence",
                recording=self._new_session(),
            )
            self._pipeline = pipeline = build_pipeline(
                self.sensor,
                source,
                packet.clock,
                width=packet.width,
                height=packet.height,
                sink=self.output,
                settings=self._settings,
            )
            self._geometry = geometry
            return pipeline
        if geometry != self._geometry:
            self._bad(f"packet for {geometry} on a {self._geometry} stream")
            return None
        return pipeline


def send_packets(
    broker: Broker,
    topic: str,
    chunks: Iterable[Events],
    *,
    width: int,
    height: int,
    clock: ClockDomain = ClockDomain.SENSOR,
    packet_events: int = 4096,
    first_sequence: int = 0,
    timeout_s: float = 10.0,
) -> int:
    """Publish ``chunks`` of events to ``topic`` as packed-event packets of at most
    ``packet_events`` each (QoS 1, waiting for each acknowledgement); return the count."""
    client = Client(CallbackAPIVersion.VERSION2, clean_session=True)
    client.connect(broker.host, broker.port, keepalive=30)
    client.loop_start()
    sequence = first_sequence
    try:
        for chunk in chunks:
            for start in range(0, max(len(chunk), 1), packet_events):
                part = chunk[start : start + packet_events]
                if len(part) == 0:
                    continue
                data = encode_packet(
                    part, width=width, height=height, sequence=sequence, clock=clock
                )
                client.publish(topic, data, qos=1).wait_for_publish(timeout=timeout_s)
                sequence += 1
    finally:
        client.disconnect()
        client.loop_stop()
    return sequence - first_sequence
