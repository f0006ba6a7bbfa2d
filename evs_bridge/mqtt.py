"""Live input over MQTT: the subscription to one sensor's topic, the threads that take its
packets, and a publisher for them (``send_packets``).

The packet format is ``evs_bridge.packets`` (re-exported here); what happens to the packets
in order (sequence numbers, restarts, sessions, bad packets) is
``evs_bridge.packet_stream``.

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
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from paho.mqtt.client import Client, ConnectFlags, DisconnectFlags, MQTTMessage
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from evs_bridge.events import MAX_SIDE_PX, ClockDomain, Events
from evs_bridge.output import Output, StoreRefused, StoreUnavailable
from evs_bridge.packet_stream import MqttStats, PacketStream
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
from evs_bridge.replay import BridgeSettings
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


def check_topic(topic: str) -> None:
    """A ``ValueError`` unless ``topic`` names one sensor's topic (no wildcard)."""
    if not topic or "+" in topic or "#" in topic:
        raise ValueError(f"topic {topic!r} must be one sensor's topic, without + or #")


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
        check_topic(topic)
        if (width is None) != (height is None):
            raise ValueError("give both width and height, or neither")
        self.broker = broker
        self.topic = topic
        self.sensor = sensor
        self.output = output
        self.stats = MqttStats()
        self.subscribed = threading.Event()
        self._queue: queue.Queue[bytes] = queue.Queue(maxsize=queue_packets)
        self._stopping = threading.Event()
        self._client = Client(CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=True)
        self._client.reconnect_delay_set(min_delay=1, max_delay=30)
        self._client.on_connect = self._on_connect
        self._client.on_subscribe = self._on_subscribe
        self._client.on_disconnect = self._on_disconnect
        self._client.on_message = self._on_message
        self._worker = threading.Thread(target=self._work, name=f"evs-{sensor}", daemon=True)
        self._stream = PacketStream(
            f"{broker}/{topic}",
            topic,
            sensor,
            output,
            self.stats,
            settings=settings or BridgeSettings(),
            pinned=None if width is None or height is None else (width, height),
        )
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
            self._stream.finish()
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
                    self._stream.take(item)
                self.output.poll()
            except (StoreRefused, StoreUnavailable, SpoolCorrupt, OSError) as exc:
                # Retrying cannot help: keep processing what comes, into the spool only,
                # until the owner sees ``failure`` and stops the bridge. (A changed spool
                # line stops every later read of the spool the same way; so does a spool
                # that cannot be written, a full disk say.)
                self._stop_for(exc)
            except Exception as exc:  # a fault of ours: stop the bridge, never just the thread
                log.exception("the %s bridge's worker failed", self.sensor)
                self._stop_for(exc)

    def _stop_for(self, exc: Exception) -> None:
        if self._failure is None:
            self._failure = exc
            log.error("the %s bridge stops: %s", self.sensor, exc)
        self.output.hold()


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
