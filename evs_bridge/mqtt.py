"""Live input over MQTT: one topic per sensor, packets in a small documented binary format.

Packet (all little-endian)::

    offset size field
    0      4    magic     b"EVSB"
    4      1    version   1
    5      1    encoding  1 = EVT 3.0 words (u16, as the sensor emits them)
                          2 = packed events: 13 bytes each, x u16, y u16, p u8, t i64 (µs),
                              the ``EVENT_DTYPE`` layout
    6      1    clock     0 = sensor time, 1 = Unix-epoch µs (packed events only; EVT 3.0
                          time is always sensor time)
    7      1    flags     0 (reserved)
    8      2    width     sensor geometry, pixels
    10     2    height
    12     8    sequence  u64, 0 for a stream's first packet, +1 for each next one
    20     ...  payload

A gap in the sequence is counted (``stats.gaps``) and logged; a sequence going back to 0
starts the stream again (a fresh EVT 3.0 decoder). The segments' ``dataref`` is the topic
with a range of sequence numbers.

Threads: paho's network loop thread only decodes the header check and enqueues the
payload on a bounded queue (``queue_packets``); when the queue is full the packet is
dropped, counted in ``stats.dropped`` and logged. A worker thread decodes, runs the
pipeline and does all HTTP (``Output``), so a slow or absent store never stalls the
network loop. paho reconnects with backoff (1 s to 30 s) after a broker restart and
``on_connect`` subscribes again every time; the session is clean, so packets published
while the bridge is disconnected are not delivered (QoS 1 while connected).

The live session's ``<recording>`` key (sensor clock ids, see ``evs_bridge.lineage``) is
the UTC time of the first packet, ``YYYYmmddTHHMMSSZ``: live data is never replayed, and
the spool keeps the ids of events already made.
"""

from __future__ import annotations

import logging
import queue
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import IntEnum
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from paho.mqtt.client import Client, ConnectFlags, DisconnectFlags, MQTTMessage
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from evs_bridge.decoders import Evt3Decoder
from evs_bridge.events import EVENT_DTYPE, ClockDomain, EventChunk, Events
from evs_bridge.lineage import SourceRef
from evs_bridge.output import Output
from evs_bridge.pipeline import Pipeline
from evs_bridge.replay import BridgeSettings, build_pipeline

log = logging.getLogger(__name__)

MAGIC = b"EVSB"
VERSION = 1
HEADER = struct.Struct("<4sBBBBHHQ")
_STOP = object()


class Encoding(IntEnum):
    EVT3 = 1
    PACKED = 2


class BadPacket(ValueError):
    """The payload is not a packet of this format."""


@dataclass(frozen=True, slots=True)
class Packet:
    encoding: Encoding
    clock: ClockDomain
    width: int
    height: int
    sequence: int
    payload: bytes


def encode_packet(
    events: Events,
    *,
    width: int,
    height: int,
    sequence: int,
    clock: ClockDomain = ClockDomain.SENSOR,
) -> bytes:
    """A packed-events packet holding ``events`` (``EVENT_DTYPE``)."""
    header = HEADER.pack(
        MAGIC,
        VERSION,
        Encoding.PACKED,
        1 if clock is ClockDomain.UNIX else 0,
        0,
        width,
        height,
        sequence,
    )
    return header + np.ascontiguousarray(events, dtype=EVENT_DTYPE).tobytes()


def encode_evt3_packet(words: bytes, *, width: int, height: int, sequence: int) -> bytes:
    """An EVT 3.0 packet: ``words`` as the sensor emitted them (little-endian u16)."""
    return HEADER.pack(MAGIC, VERSION, Encoding.EVT3, 0, 0, width, height, sequence) + words


def decode_packet(data: bytes) -> Packet:
    if len(data) < HEADER.size:
        raise BadPacket(f"{len(data)} bytes is shorter than the {HEADER.size}-byte header")
    magic, version, encoding, clock, _, width, height, sequence = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise BadPacket(f"magic {magic!r} is not {MAGIC!r}")
    if version != VERSION:
        raise BadPacket(f"version {version} is not {VERSION}")
    if encoding not in (Encoding.EVT3, Encoding.PACKED) or clock not in (0, 1):
        raise BadPacket(f"encoding {encoding} or clock {clock} is unknown")
    payload = data[HEADER.size :]
    item = EVENT_DTYPE.itemsize if encoding == Encoding.PACKED else 2
    if len(payload) % item:
        raise BadPacket(f"payload of {len(payload)} bytes is not whole {item}-byte items")
    if width == 0 or height == 0:
        raise BadPacket("width and height must not be 0")
    return Packet(
        encoding=Encoding(encoding),
        clock=ClockDomain.UNIX
        if clock == 1 and encoding == Encoding.PACKED
        else ClockDomain.SENSOR,
        width=width,
        height=height,
        sequence=sequence,
        payload=payload,
    )


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
    connects: int = 0


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
    ) -> None:
        self.broker = broker
        self.topic = topic
        self.sensor = sensor
        self.output = output
        self.stats = MqttStats()
        self.subscribed = threading.Event()
        self._settings = settings or BridgeSettings()
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_packets)
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
        self._failure: BaseException | None = None

    @property
    def failure(self) -> BaseException | None:
        """What stopped the worker early (e.g. the store refusing the key), else None."""
        return self._failure

    def start(self) -> None:
        self._worker.start()
        self._client.connect_async(self.broker.host, self.broker.port, keepalive=30)
        self._client.loop_start()

    def stop(self, *, drain_timeout_s: float = 0.0) -> None:
        """Disconnect, process what is queued, flush the output (and its spool, for up to
        ``drain_timeout_s``)."""
        self._client.disconnect()
        self._client.loop_stop()
        self._queue.put(_STOP)
        self._worker.join()
        if self._failure is None:
            if self._pipeline is not None:
                self._pipeline.finish()
            self.output.close(drain_timeout_s=drain_timeout_s)

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
        self.stats.received += 1
        try:
            self._queue.put_nowait(message.payload)
        except queue.Full:
            self.stats.dropped += 1
            log.warning(
                "%s: packet queue full, dropped a packet (%d dropped so far)",
                self.topic,
                self.stats.dropped,
            )

    def _work(self) -> None:
        try:
            while True:
                try:
                    item = self._queue.get(timeout=0.1)
                except queue.Empty:
                    self.output.poll()
                    continue
                if item is _STOP:
                    return
                if isinstance(item, bytes):
                    self._process(item)
                self.output.poll()
        except Exception as exc:  # the worker must not die silently
            self._failure = exc
            log.exception("the %s bridge stopped", self.sensor)

    def _process(self, data: bytes) -> None:
        try:
            packet = decode_packet(data)
        except BadPacket as exc:
            self.stats.bad += 1
            log.warning("%s: dropped a bad packet: %s", self.topic, exc)
            return
        pipeline = self._pipeline_for(packet)
        if pipeline is None:
            return
        expected = self._next_sequence
        if expected is not None and packet.sequence != expected:
            if packet.sequence == 0:
                log.warning("%s: sequence restarted at 0", self.topic)
                self._decoder = None
            elif packet.sequence > expected:
                self.stats.gaps += packet.sequence - expected
                log.warning(
                    "%s: %d packets missing before %d",
                    self.topic,
                    packet.sequence - expected,
                    packet.sequence,
                )
        self._next_sequence = packet.sequence + 1
        events = self._events(packet)
        pipeline.feed(EventChunk(events, packet.sequence, packet.sequence + 1))
        self.stats.processed += 1

    def _events(self, packet: Packet) -> Events:
        if packet.encoding == Encoding.PACKED:
            return np.frombuffer(packet.payload, dtype=EVENT_DTYPE).copy()
        if self._decoder is None:
            self._decoder = Evt3Decoder(packet.width, packet.height)
        return self._decoder.decode(packet.payload)

    def _pipeline_for(self, packet: Packet) -> Pipeline | None:
        pipeline = self._pipeline
        if pipeline is None:
            session = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            source = SourceRef(
                uri=f"{self.broker}/{self.topic}",
                format="evt3" if packet.encoding == Encoding.EVT3 else "packed",
                offset_unit="sequence",
                recording=session,
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
            self._geometry = (packet.width, packet.height, packet.clock)
            return pipeline
        geometry = (packet.width, packet.height, packet.clock)
        if geometry != self._geometry:
            self.stats.bad += 1
            log.error(
                "%s: packet for %s on a %s stream: dropped", self.topic, geometry, self._geometry
            )
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
