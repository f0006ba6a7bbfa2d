"""A segment's events are not lost when emitting them is interrupted.

``Pipeline.feed`` takes the closed segments out of the cutter and then emits them one event
at a time into the ``Output``. When a ``put`` raised half-way (the store refused the key on
the first red event, or a classifier raised), the rest of that segment's events, and every
later segment closed by the same chunk, were never emitted by anyone.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from evs_bridge.events import EVENT_DTYPE
from evs_bridge.mqtt import Broker, MqttBridge, encode_packet
from evs_bridge.output import NdjsonSink, Output, StoreRefused
from evs_bridge.regions import Region
from evs_bridge.replay import BridgeSettings
from evs_bridge.spool import Spool
from tests.unit.evs_bridge.test_mqtt import RefusingSink, packed


def _tail(event_id: str) -> str:
    """The id without ``evs:<sensor>:<session>:`` (the live session key is wall-clock)."""
    return event_id.split(":", 3)[3]


def _ndjson_run(packets: list[bytes], **options: Any) -> list[dict[str, Any]]:
    buffer = io.StringIO()
    bridge = MqttBridge(
        Broker("127.0.0.1", 1), "sensors/x", "s1", Output(NdjsonSink(buffer)), **options
    )
    for data in packets:
        bridge.submit(data)
    bridge.stop()
    return [orjson.loads(line) for line in buffer.getvalue().splitlines()]


def test_a_key_refused_mid_segment_still_spools_everything_the_pipeline_held(
    tmp_path: Path,
) -> None:
    # docs/evs-bridge.md, MQTT: "If the store refused the key ..., everything from then on,
    # including what the pipeline still holds, goes to the spool". The first face (red)
    # flushes at once, the store says 401: the rest of that segment was dropped.
    packets = [packed(sequence, sequence * 10_000) for sequence in range(30)]
    expected = [_tail(e["id"]) for e in _ndjson_run(packets)]

    output = Output(RefusingSink(), Spool(tmp_path / "spool"))
    bridge = MqttBridge(Broker("127.0.0.1", 1), "sensors/x", "s1", output)
    for data in packets:
        bridge.submit(data)
    bridge.stop()
    assert isinstance(bridge.failure, StoreRefused)
    with Spool(tmp_path / "spool") as spool:
        spooled = [_tail(e["id"]) for e in spool.read_batch(10_000).events]

    missing = [i for i in expected if i not in spooled]
    assert missing == [], f"never spooled nor sent: {missing}"
    assert spooled == expected


class _FailsOnce:
    """A classifier that raises on its first region (a model that hiccups once)."""

    def __init__(self) -> None:
        self.calls = 0

    def classify(self, region: Region) -> tuple[str, float]:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("model hiccup")
        return "other", 0.3


def _blob_packet(sequence: int, start_us: int, end_us: int, count: int = 3000) -> bytes:
    rng = np.random.default_rng(sequence)
    events = np.zeros(count, dtype=EVENT_DTYPE)
    events["x"] = rng.integers(100, 120, count)
    events["y"] = rng.integers(100, 120, count)
    events["t"] = np.sort(rng.integers(start_us, end_us, count))
    return encode_packet(events, width=320, height=240, sequence=sequence)


def test_a_classifier_error_drops_one_packet_not_a_whole_other_segment() -> None:
    # docs: "A bad packet is dropped and counted ... any error while decoding it or running
    # the pipeline on it (a classifier that raises, say)". Packet 0 fills segment 0
    # (0-100 ms); packet 1 spans 100-210 ms, so feeding it closes segments 0 and 1 at
    # once. The classifier raises on segment 0's first region: segment 1 was never
    # emitted, its segment event and all its activities gone, not just one packet.
    packets = [
        _blob_packet(0, 0, 100_000),
        _blob_packet(1, 100_000, 210_000, count=6000),
        _blob_packet(2, 210_000, 400_000, count=6000),
    ]
    settings = BridgeSettings(classifier=_FailsOnce())
    written = _ndjson_run(packets, settings=settings)
    segments = [
        e["data"]["window"]["start_us"] for e in written if e["type"] == "evs.segment.recorded"
    ]
    assert 100_000 in segments, f"segment 100000 was never emitted; segments: {segments}"
