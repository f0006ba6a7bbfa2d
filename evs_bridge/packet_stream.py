"""One sensor's live stream of packets, in order: sequence numbers, restarts and sessions,
each packet's events decoded and fed to the pipeline. ``evs_bridge.mqtt`` feeds it from
its worker thread; nothing here touches the network or blocks on it.

A gap in the sequence is counted (``stats.gaps``) and logged; a packet whose sequence
repeats or goes back (not to 0), or the session's packet 0 delivered again (QoS 1 delivers
at least once), is dropped and counted (``stats.stale``): the latter only while the
session's sequence is below ``_REDELIVERY_PACKETS`` (a publisher resends at most its
in-flight window); later, the same bytes are the same recording published again, a new
stream. A restart of the stream, a sequence going back to 0 or (either clock)
``jump_confirm_events`` consecutive events more than the pipeline's ``jump_us`` behind the
newest one, finishes the old pipeline (its segments are emitted) and starts a new one with a
new session key (``stats.restarts``), and a fresh EVT 3.0 decoder; fewer such events are
outliers, dropped and counted (``stats.outliers``), so one flipped timestamp does not
restart the stream. A packet that cannot be processed (a bad header, flags not 0, a geometry
above ``MAX_SIDE_PX`` or other than the stream's or the pinned one, or any error while
decoding or running the pipeline on it) is dropped and counted (``stats.bad``), and logged
once per ``_LOG_EVERY``; it never stops the stream. Events outside the header's geometry are
dropped and counted by the pipeline (``stats.out_of_geometry``). The segments' ``dataref``
is the topic with a range of sequence numbers.

The live session's ``<recording>`` key (in every id, see ``evs_bridge.lineage``) is the UTC
time of the session's first packet, ``YYYYmmddTHHMMSSZ`` (``.1``, ``.2``... appended to the
previous session's key when a restart falls in the same second, or in an earlier one after
the machine's clock stepped back): live data is never replayed, and the spool keeps the
ids of events already made.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from evs_bridge.decoders import Evt3Decoder
from evs_bridge.events import EVENT_DTYPE, ClockDomain, EventChunk, Events
from evs_bridge.lineage import SourceRef
from evs_bridge.output import Output, StoreRefused, StoreUnavailable
from evs_bridge.packets import BadPacket, Encoding, Packet, decode_packet
from evs_bridge.pipeline import Pipeline
from evs_bridge.replay import BridgeSettings, build_pipeline
from evs_bridge.spool import SpoolCorrupt

# The MQTT bridge's lines keep the logger name they had before this module was split
# from ``evs_bridge.mqtt``: operators filter the bridge's log on it.
log = logging.getLogger("evs_bridge.mqtt")

_LOG_EVERY = 100
# A publisher that reconnects resends what was not acknowledged: paho keeps 20 messages in
# flight by default. Packet 0 byte for byte while a session is this young is such a copy.
_REDELIVERY_PACKETS = 64


@dataclass(slots=True)
class MqttStats:
    """What one live bridge counted: ``received``, ``dropped`` and ``connects`` on the
    network side (``evs_bridge.mqtt``), the rest in the packet stream."""

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


class PacketStream:
    """Turns one topic's packets, as they arrive, into pipeline input (one pipeline per
    session), counting into ``stats``."""

    def __init__(
        self,
        uri: str,
        topic: str,
        sensor: str,
        output: Output,
        stats: MqttStats,
        *,
        settings: BridgeSettings,
        pinned: tuple[int, int] | None,
    ) -> None:
        self.topic = topic
        self.stats = stats
        self._uri = uri  # the source's URI: the broker and the topic
        self._sensor = sensor
        self._output = output
        self._settings = settings
        self._pinned = pinned
        self._pipeline: Pipeline | None = None
        self._geometry: tuple[int, int, ClockDomain] | None = None
        self._decoder: Evt3Decoder | None = None
        self._next_sequence: int | None = None
        self._session: str | None = None
        self._earlier = (0, 0)  # out-of-geometry and outlier counts of finished pipelines
        self._behind = _StepsBack(settings.pipeline.jump_confirm_events)
        self._first_packet: bytes | None = None  # this session's packet 0, as received

    def take(self, data: bytes) -> None:
        """Process one packet; a bad one is dropped and counted. Only the output's errors
        (the store refusing, the spool unusable) propagate."""
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
        # Either clock: a unix clock steps back too (NTP, an operator), and its events
        # would otherwise all be late, lumped into the last open segment until the clock
        # caught up again.
        if newest is not None and len(events):
            kept, restart_at = self._behind.split(events["t"], newest, pipeline.jump_us)
            if restart_at is not None:
                pipeline.feed(EventChunk(events[:restart_at][kept], *chunk))
                self._restart(
                    f"{packet.clock.value} time went back from {newest} to "
                    f"{int(events['t'][restart_at])} µs"
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
        self.finish()
        self._decoder = None
        self._behind.reset()
        self._first_packet = None

    def finish(self) -> None:
        """Finish the pipeline at hand, if any: its last segments are emitted. What fails
        there (the classifier, on a region only the end closes) is counted as a bad
        packet, as in ``take``: the bridge stops or restarts the stream all the same, and
        what is queued for the store is still flushed. Only the output's errors
        propagate."""
        pipeline, self._pipeline, self._geometry = self._pipeline, None, None
        if pipeline is not None:
            self._earlier = (
                self._earlier[0] + pipeline.stats.out_of_geometry,
                self._earlier[1] + pipeline.stats.outliers,
            )
            try:
                pipeline.finish()
            except (StoreRefused, StoreUnavailable, SpoolCorrupt):
                raise
            except Exception as exc:  # as in take: one bad segment must not stop the bridge
                self._bad(f"{type(exc).__name__}: {exc}")

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
        """The next session's key: never one this stream had before, even when the
        machine's clock stepped back (that key's ids, with the sensor times from 0 again,
        would be the earlier session's: refused as 409s, or taken as its duplicates)."""
        key = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        previous = self._session
        if previous is not None:
            base, _, number = previous.partition(".")
            if key <= base:  # the same second, or an earlier one: count on from it
                key = f"{base}.{int(number or 0) + 1}"
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
                uri=self._uri,
                format="evt3" if packet.encoding == Encoding.EVT3 else "packed",
                offset_unit="sequence",
                recording=self._new_session(),
            )
            self._pipeline = pipeline = build_pipeline(
                self._sensor,
                source,
                packet.clock,
                width=packet.width,
                height=packet.height,
                sink=self._output,
                settings=self._settings,
            )
            self._geometry = geometry
            return pipeline
        if geometry != self._geometry:
            self._bad(f"packet for {geometry} on a {self._geometry} stream")
            return None
        return pipeline
