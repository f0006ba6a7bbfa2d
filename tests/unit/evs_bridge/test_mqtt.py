"""The MQTT packet format, without a broker (the integration tests use the real one)."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from evs_bridge.decoders import Evt3Decoder
from evs_bridge.events import EVENT_DTYPE, ClockDomain
from evs_bridge.mqtt import (
    HEADER,
    MAX_SIDE_PX,
    BadPacket,
    Broker,
    Encoding,
    MqttBridge,
    decode_packet,
    encode_evt3_packet,
    encode_packet,
)
from evs_bridge.output import NdjsonSink, Output, StoreRefused
from evs_bridge.regions import Region
from evs_bridge.replay import BridgeSettings
from evs_bridge.spool import Spool, SpoolCorrupt
from ingest.client import CausewayError


def some_events() -> np.ndarray:
    events = np.zeros(3, dtype=EVENT_DTYPE)
    events["x"], events["y"], events["p"], events["t"] = [1, 2, 3], [4, 5, 6], [0, 1, 1], [7, 8, 9]
    return events


class TestPackets:
    def test_packed_events_round_trip(self) -> None:
        data = encode_packet(
            some_events(), width=640, height=480, sequence=42, clock=ClockDomain.UNIX
        )
        assert len(data) == HEADER.size + 3 * 13
        packet = decode_packet(data)
        assert (packet.encoding, packet.clock, packet.width, packet.height, packet.sequence) == (
            Encoding.PACKED,
            ClockDomain.UNIX,
            640,
            480,
            42,
        )
        decoded = np.frombuffer(packet.payload, dtype=EVENT_DTYPE)
        assert decoded.tolist() == some_events().tolist()

    def test_the_header_layout_is_the_documented_one(self) -> None:
        data = encode_packet(some_events()[:0], width=1280, height=720, sequence=1)
        assert data == b"EVSB\x01\x02\x00\x00" + (1280).to_bytes(2, "little") + (720).to_bytes(
            2, "little"
        ) + (1).to_bytes(8, "little")

    def test_evt3_words_decode_with_the_stateful_decoder(self) -> None:
        words = np.array(
            [0x8000 | 0x001, 0x6000 | 0x010, 0x0000 | 100, 0x2000 | 0x800 | 200], dtype="<u2"
        )
        packet = decode_packet(
            encode_evt3_packet(words.tobytes(), width=1280, height=720, sequence=0)
        )
        assert (packet.encoding, packet.clock) == (Encoding.EVT3, ClockDomain.SENSOR)
        [event] = Evt3Decoder().decode(packet.payload).tolist()
        assert event == (200, 100, 1, (1 << 12) | 0x010)

    @pytest.mark.parametrize(
        ("data", "why"),
        [
            (b"EVSB", "shorter"),
            (b"XXXX" + bytes(16), "magic"),
            (HEADER.pack(b"EVSB", 9, 2, 0, 0, 1, 1, 0), "version"),
            (HEADER.pack(b"EVSB", 1, 7, 0, 0, 1, 1, 0), "encoding"),
            (HEADER.pack(b"EVSB", 1, 2, 0, 0, 1, 1, 0) + b"\x00" * 5, "whole"),
            (HEADER.pack(b"EVSB", 1, 2, 0, 0, 0, 1, 0), "width"),
        ],
    )
    def test_a_bad_packet_says_why(self, data: bytes, why: str) -> None:
        with pytest.raises(BadPacket, match=why):
            decode_packet(data)


class TestBroker:
    @pytest.mark.parametrize(
        ("url", "host", "port"),
        [
            ("mqtt://10.0.0.2:1884", "10.0.0.2", 1884),
            ("broker.local", "broker.local", 1883),
            ("127.0.0.1:1883", "127.0.0.1", 1883),
        ],
    )
    def test_urls(self, url: str, host: str, port: int) -> None:
        assert Broker.parse(url) == Broker(host, port)

    def test_a_non_mqtt_url_is_refused(self) -> None:
        with pytest.raises(ValueError, match="mqtt://"):
            Broker.parse("http://example.com")


def packed(
    sequence: int,
    start_us: int,
    *,
    count: int = 2000,
    x: int = 100,
    clock: ClockDomain = ClockDomain.SENSOR,
    flags: int = 0,
) -> bytes:
    """A dense 20x20 blob at (x, 100) for 10 ms from ``start_us``."""
    rng = np.random.default_rng(sequence)
    events = np.zeros(count, dtype=EVENT_DTYPE)
    events["x"] = rng.integers(x, x + 20, count)
    events["y"] = rng.integers(100, 120, count)
    events["t"] = np.sort(rng.integers(start_us, start_us + 10_000, count))
    data = encode_packet(events, width=320, height=240, sequence=sequence, clock=clock)
    return data[:7] + bytes([flags]) + data[8:]


class RefusingSink:
    def send(self, events: list[dict[str, Any]]) -> int:
        raise CausewayError(401, {"type": "/problems/unauthenticated", "detail": "bad key"})


class RaisingClassifier:
    def __init__(self) -> None:
        self.calls = 0

    def classify(self, region: Region) -> tuple[str, float]:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("model crashed")
        return "face", 0.5


def bridge_to(buffer: io.StringIO, **options: Any) -> MqttBridge:
    return MqttBridge(
        Broker("127.0.0.1", 1), "sensors/x", "s1", Output(NdjsonSink(buffer)), **options
    )


def written(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in buffer.getvalue().splitlines()]


class TestBridgeWorker:
    """The worker's packet handling, fed through ``submit`` (no broker: the bridge is
    never started, so ``stop`` processes the queue itself)."""

    def test_a_sequence_restart_finishes_the_old_session_and_starts_a_new_one(self) -> None:
        buffer = io.StringIO()
        bridge = bridge_to(buffer)
        for sequence in range(100):
            bridge.submit(packed(sequence, 10_000_000 + sequence * 10_000))
        for sequence in range(100):
            bridge.submit(packed(sequence, sequence * 10_000))
        bridge.stop()
        assert bridge.stats.restarts == 1
        segments = [e for e in written(buffer) if e["type"] == "evs.segment.recorded"]
        sessions = {e["id"].split(":")[2] for e in segments}
        assert len(sessions) == 2
        assert {e["data"]["window"]["start_us"] for e in segments} >= {0, 10_000_000}
        assert sum(e["data"]["events"]["in"] for e in segments) == 200 * 2000
        ids = [e["id"] for e in written(buffer)]
        assert len(set(ids)) == len(ids)

    def test_a_big_step_back_in_sensor_time_is_a_restart(self) -> None:
        buffer = io.StringIO()
        bridge = bridge_to(buffer)
        for sequence in range(60):
            start = 5_000_000 + sequence * 10_000 if sequence < 30 else (sequence - 30) * 10_000
            bridge.submit(packed(sequence, start))
        bridge.stop()
        assert bridge.stats.restarts == 1
        segments = [e for e in written(buffer) if e["type"] == "evs.segment.recorded"]
        assert sum(e["data"]["events"]["in"] for e in segments) == 60 * 2000

    def test_one_timestamp_flipped_far_back_is_an_outlier_not_a_restart(self) -> None:
        buffer = io.StringIO()
        bridge = bridge_to(buffer)
        for sequence in range(30):
            data = packed(sequence, 5_000_000 + sequence * 10_000)
            if sequence == 10:  # the packet's 1000th event loses its high bits
                events = np.frombuffer(decode_packet(data).payload, dtype=EVENT_DTYPE).copy()
                events["t"][1000] = 3
                data = encode_packet(events, width=320, height=240, sequence=10)
            bridge.submit(data)
        bridge.stop()
        assert (bridge.stats.restarts, bridge.stats.outliers) == (0, 1)
        segments = [e for e in written(buffer) if e["type"] == "evs.segment.recorded"]
        assert len({e["id"].split(":")[2] for e in segments}) == 1
        assert sum(e["data"]["events"]["in"] for e in segments) == 30 * 2000 - 1

    def test_a_step_back_confirmed_across_small_packets_restarts_there(self) -> None:
        # Eight events must agree: packets of three confirm it in the third packet, whose
        # events start the new session; the six before it are lost, as outliers.
        buffer = io.StringIO()
        bridge = bridge_to(buffer)
        for sequence in range(60):
            start = 5_000_000 + sequence * 10_000 if sequence < 30 else (sequence - 30) * 10_000
            bridge.submit(packed(sequence, start, count=3))
        bridge.stop()
        assert (bridge.stats.restarts, bridge.stats.outliers) == (1, 6)
        segments = [e for e in written(buffer) if e["type"] == "evs.segment.recorded"]
        assert len({e["id"].split(":")[2] for e in segments}) == 2
        assert sum(e["data"]["events"]["in"] for e in segments) == 60 * 3 - 6

    def test_packet_0_delivered_again_is_dropped_not_a_restart(self) -> None:
        buffer = io.StringIO()
        bridge = bridge_to(buffer)
        first = packed(0, 0)
        for data in (first, packed(1, 10_000), first, packed(2, 20_000)):
            bridge.submit(data)
        bridge.stop()
        assert (bridge.stats.stale, bridge.stats.restarts, bridge.stats.processed) == (1, 0, 3)

    def test_the_same_recording_published_twice_is_two_sessions(self) -> None:
        # Its packet 0 comes again byte for byte, long after: a new stream, not a copy.
        buffer = io.StringIO()
        bridge = bridge_to(buffer)
        recording = [packed(sequence, sequence * 10_000, count=200) for sequence in range(80)]
        for data in recording + recording:
            bridge.submit(data)
        bridge.stop()
        assert (bridge.stats.processed, bridge.stats.stale, bridge.stats.restarts) == (160, 0, 1)
        segments = [e for e in written(buffer) if e["type"] == "evs.segment.recorded"]
        assert len({e["id"].split(":")[2] for e in segments}) == 2
        assert sum(e["data"]["events"]["in"] for e in segments) == 160 * 200

    def test_a_publisher_that_reconnects_and_resends_is_no_restart(self) -> None:
        # What was not acknowledged comes again, packet 0 first, then the stream goes on.
        bridge = bridge_to(io.StringIO())
        packets = [packed(sequence, sequence * 10_000) for sequence in range(6)]
        for data in [*packets[:3], *packets[:3], *packets[3:], packets[0]]:
            bridge.submit(data)
        bridge.stop()
        assert (bridge.stats.processed, bridge.stats.stale, bridge.stats.restarts) == (6, 4, 0)

    def test_a_bad_packet_is_counted_and_the_bridge_goes_on(self) -> None:
        buffer = io.StringIO()
        classifier = RaisingClassifier()
        bridge = bridge_to(buffer, settings=BridgeSettings(classifier=classifier))
        bridge.submit(packed(0, 0))
        bridge.submit(packed(1, 10_000, x=500))  # every event outside the 320x240 geometry
        for sequence in range(2, 30):
            bridge.submit(packed(sequence, sequence * 10_000))
        bridge.stop()
        assert bridge.failure is None
        assert bridge.stats.out_of_geometry == 2000
        assert bridge.stats.bad == 1  # the packet whose region the classifier choked on
        assert bridge.stats.processed == 29
        assert any(e["type"] == "evs.activity.detected" for e in written(buffer))

    def test_stop_flushes_the_output_when_the_last_segment_fails(self) -> None:
        # The classifier raising on the segment only the end closes made stop() raise
        # before the output was closed: every queued event of the earlier segments lost.
        class FailsAtTheEnd:
            def classify(self, region: Region) -> tuple[str, float]:
                if region.window_start_us >= 200_000:
                    raise RuntimeError("model crashed")
                return "other", 0.3

        buffer = io.StringIO()
        bridge = bridge_to(buffer, settings=BridgeSettings(classifier=FailsAtTheEnd()))
        for sequence in range(30):  # 0-300 ms: segments at 0, 100 and 200 ms
            bridge.submit(packed(sequence, sequence * 10_000))
        bridge.stop()
        assert bridge.failure is None
        assert bridge.stats.bad == 1
        segments = [e for e in written(buffer) if e["type"] == "evs.segment.recorded"]
        assert {0, 100_000} <= {e["data"]["window"]["start_us"] for e in segments}

    def test_stop_never_blocks_on_a_full_queue(self) -> None:
        buffer = io.StringIO()
        bridge = bridge_to(buffer, queue_packets=2)
        for sequence in range(5):
            bridge.submit(packed(sequence, sequence * 10_000))
        done = threading.Thread(target=bridge.stop, daemon=True)
        done.start()
        done.join(10)
        assert not done.is_alive()
        assert (bridge.stats.dropped, bridge.stats.processed) == (3, 2)
        assert written(buffer)

    def test_a_refused_key_stops_the_worker_and_everything_is_spooled(self, tmp_path: Path) -> None:
        output = Output(RefusingSink(), Spool(tmp_path))
        bridge = MqttBridge(Broker("127.0.0.1", 1), "sensors/x", "s1", output)
        for sequence in range(30):
            bridge.submit(packed(sequence, sequence * 10_000))
        bridge.stop()
        assert isinstance(bridge.failure, StoreRefused)
        with Spool(tmp_path) as spool:
            spooled = spool.read_batch(10_000).events
        segments = [e for e in spooled if e["type"] == "evs.segment.recorded"]
        assert segments[-1]["data"]["window"]["start_us"] == 200_000  # the last one, finished

    def test_repeated_and_backward_sequences_are_dropped(self) -> None:
        buffer = io.StringIO()
        bridge = bridge_to(buffer)
        for sequence in (0, 1, 2, 2, 1, 3):
            bridge.submit(packed(sequence, sequence * 10_000))
        bridge.stop()
        assert (bridge.stats.stale, bridge.stats.processed, bridge.stats.restarts) == (2, 4, 0)

    def test_a_pinned_geometry_refuses_other_packets(self) -> None:
        bridge = bridge_to(io.StringIO(), width=640, height=480)
        bridge.submit(packed(0, 0))
        bridge.stop()
        assert (bridge.stats.bad, bridge.stats.processed) == (1, 0)

    def test_evt3_triggers_are_taken_from_the_decoder(self) -> None:
        words = np.array([0x8000 | 0x001, 0x6000 | 0x010, 0xA000 | 0x001], dtype="<u2")
        bridge = bridge_to(io.StringIO())
        for sequence in range(3):
            bridge.submit(
                encode_evt3_packet(words.tobytes(), width=1280, height=720, sequence=sequence)
            )
        bridge.stop()
        assert bridge.stats.triggers == 3

    @pytest.mark.parametrize("topic", ["sensors/#", "sensors/+/events", ""])
    def test_wildcard_topics_are_refused(self, topic: str) -> None:
        with pytest.raises(ValueError, match="topic"):
            MqttBridge(Broker("h", 1), topic, "s1", Output(NdjsonSink(io.StringIO())))


class TestHeaderChecks:
    def test_reserved_flags_must_be_0(self) -> None:
        with pytest.raises(BadPacket, match="flags"):
            decode_packet(packed(0, 0, flags=1))

    def test_a_huge_geometry_is_refused(self) -> None:
        data = encode_packet(some_events(), width=MAX_SIDE_PX + 1, height=10, sequence=0)
        with pytest.raises(BadPacket, match="geometry"):
            decode_packet(data)


def test_a_changed_spool_line_stops_the_bridge_with_a_failure(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:
        spool.append([{"id": "e0"}])
    [segment] = tmp_path.glob("spool-*.ndjson")
    segment.write_bytes(b"this is not json\n")
    bridge = MqttBridge(
        Broker("127.0.0.1", 1),
        "sensors/x",
        "s1",
        Output(NdjsonSink(io.StringIO()), Spool(tmp_path)),
    )
    bridge.submit(packed(0, 0))
    bridge.stop()  # the worker has drained the queue, and tried the spool, by then
    assert isinstance(bridge.failure, SpoolCorrupt)
