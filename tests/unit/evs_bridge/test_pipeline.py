"""The pipeline end to end, without a store: event shapes, cause order, ids, determinism."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from evs_bridge.channels import Delivery
from evs_bridge.events import ClockDomain, EventChunk, Events
from evs_bridge.lineage import SourceRef, rfc3339_us
from evs_bridge.pipeline import PipelineConfig
from evs_bridge.regions import RegionParams
from evs_bridge.replay import BridgeSettings, build_pipeline, send_recording
from tests.unit.evs_bridge.scenes import FACE, HEIGHT, PERSON, VEHICLE, WIDTH, scene

SAMPLES = Path(__file__).parents[2] / "data" / "evs-samples" / "event_camera_codecs"
PROPHESEE_BAG = SAMPLES / "test_data_evt3_trigger" / "test_data_evt3_trigger_0.db3"
SOURCE = SourceRef(uri="file:scene.npz", format="npz", offset_unit="event", recording="abc123")


class ListSink:
    def __init__(self) -> None:
        self.events: list[tuple[dict[str, Any], Delivery]] = []

    def put(self, event: dict[str, Any], delivery: Delivery) -> None:
        self.events.append((event, delivery))

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [e for e, _ in self.events if e["type"] == kind]


def run(
    events: Events,
    *,
    chunk: int = 4096,
    clock: ClockDomain = ClockDomain.SENSOR,
    sensor: str = "gate-1",
    settings: BridgeSettings | None = None,
) -> ListSink:
    sink = ListSink()
    pipeline = build_pipeline(
        sensor, SOURCE, clock, width=WIDTH, height=HEIGHT, sink=sink, settings=settings
    )
    for start in range(0, len(events), chunk):
        pipeline.feed(EventChunk(events[start : start + chunk], start, start + chunk))
    pipeline.finish()
    return sink


class TestEvents:
    def test_a_segment_comes_before_the_activities_it_causes(self) -> None:
        sink = run(scene([FACE, PERSON]))
        seen: set[str] = set()
        for event, _ in sink.events:
            for cause in event.get("causationid", "").split(","):
                assert not cause or cause in seen, f"{event['id']} before its cause {cause}"
            seen.add(event["id"])
        assert len(sink.of_type("evs.segment.recorded")) == 4
        assert len(sink.of_type("evs.activity.detected")) == 40

    def test_an_activity_names_its_segment_label_channel_and_priority(self) -> None:
        sink = run(scene([FACE]))
        segment = sink.of_type("evs.segment.recorded")[0]
        activity, delivery = next(
            (e, d) for e, d in sink.events if e["type"] == "evs.activity.detected"
        )
        assert activity["causationid"] == segment["id"] == "evs:gate-1:abc123:seg:1000000"
        assert activity["id"] == "evs:gate-1:abc123:act:1000000:0"
        assert activity["source"] == "evs://gate-1"
        assert activity["priority"] == 9
        assert delivery is Delivery.IMMEDIATE
        data = activity["data"]
        assert data["label"] == "face"
        assert data["channel"] == "red"
        assert data["bbox"] == {"x": 100, "y": 80, "width": 40, "height": 40}
        assert set(data) >= {"event_count", "centroid", "velocity_px_s", "confidence", "track"}

    def test_a_segment_counts_every_stage_and_points_at_its_source(self) -> None:
        segment = run(scene([FACE]), chunk=10**6).of_type("evs.segment.recorded")[0]
        data = segment["data"]
        assert data["window"] == {
            "start_us": 1_000_000,
            "end_us": 1_100_000,
            "window_us": 20_000,
            "windows": 5,
        }
        counts = data["events"]
        assert counts["in"] >= counts["after_hot_pixel"] >= counts["after_background"] > 0
        assert data["filter_ratio"] == round(counts["after_background"] / counts["in"], 6)
        assert data["dataref"] == {
            "uri": "file:scene.npz",
            "format": "npz",
            "offsets": [0, 10**6],
            "offset_unit": "event",
        }
        assert data["clock"] == "sensor"
        assert "time" not in segment

    def test_the_unix_clock_gives_a_time_derived_from_the_sensor(self) -> None:
        events = scene([VEHICLE])
        events["t"] += 1_702_309_120_000_000
        segment = run(events, clock=ClockDomain.UNIX).of_type("evs.segment.recorded")[0]
        assert segment["time"] == rfc3339_us(segment["data"]["window"]["start_us"])
        assert segment["time"] == "2023-12-11T15:38:41.000000Z"
        assert segment["id"] == "evs:gate-1:seg:1702309121000000"

    def test_sustained_activity_is_signalled_once_per_run(self) -> None:
        sink = run(scene([PERSON]))
        [sustained] = sink.of_type("evs.activity.sustained")
        causes = sustained["causationid"].split(",")
        assert len(causes) == 10
        assert causes[0] == "evs:gate-1:abc123:act:1000000:0"
        assert sustained["data"]["windows"] == 10
        assert sustained["priority"] == 2

    def test_attributes_stay_inside_the_store_limit(self) -> None:
        settings = BridgeSettings(run="r" * 64)
        sink = run(scene([FACE, VEHICLE, PERSON]), sensor="s" * 64, settings=settings)
        for event, _ in sink.events:
            attributes = {k: v for k, v in event.items() if k != "data"}
            assert len(orjson.dumps(attributes)) <= 1024

    def test_a_bad_sensor_id_is_refused(self) -> None:
        with pytest.raises(ValueError, match="sensor id"):
            run(scene([FACE]), sensor="gate,1")


class TestDeterminism:
    def test_a_rerun_makes_the_same_bytes(self) -> None:
        events = scene([FACE, VEHICLE, PERSON])
        first = [orjson.dumps(e) for e, _ in run(events).events]
        again = [orjson.dumps(e) for e, _ in run(events).events]
        assert first == again

    def test_activities_do_not_depend_on_the_chunking(self) -> None:
        events = scene([FACE, VEHICLE, PERSON])
        coarse = run(events, chunk=50_000).of_type("evs.activity.detected")
        fine = run(events, chunk=777).of_type("evs.activity.detected")
        assert coarse == fine


class TestRealRecording:
    def test_the_prophesee_bag_goes_through_with_its_activity(self) -> None:
        sink = ListSink()
        stats = send_recording(PROPHESEE_BAG, "bag-1", sink)
        assert stats.events_in == 82_469
        assert stats.after_background < stats.after_hot_pixel <= stats.events_in
        segments = sink.of_type("evs.segment.recorded")
        assert len(segments) == stats.segments == 13
        dataref = segments[0]["data"]["dataref"]
        assert dataref["format"] == "rosbag2-evt3"
        assert dataref["offset_unit"] == "message"
        assert dataref["sha256"].startswith(segments[0]["id"].split(":")[2])
        assert len({e["id"] for e, _ in sink.events}) == len(sink.events)
        assert stats.activities >= 1

    def test_smaller_regions_find_more_in_the_noise(self) -> None:
        settings = BridgeSettings(
            pipeline=PipelineConfig(regions=RegionParams(min_cell_events=2, min_region_events=10))
        )
        sink = ListSink()
        stats = send_recording(PROPHESEE_BAG, "bag-1", sink, settings=settings)
        assert stats.activities > 1
