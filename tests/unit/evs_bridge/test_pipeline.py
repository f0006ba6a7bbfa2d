"""The pipeline end to end, without a store: event shapes, cause order, ids, determinism."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from evs_bridge.channels import Delivery
from evs_bridge.events import ClockDomain, EventChunk, Events
from evs_bridge.lineage import MAX_UNIX_US, SourceRef, rfc3339_us
from evs_bridge.pipeline import ClassifierError, PipelineConfig, PipelineStats
from evs_bridge.regions import Region, RegionParams
from evs_bridge.replay import BridgeSettings, build_pipeline, send_recording
from tests.unit.evs_bridge.scenes import FACE, HEIGHT, PERSON, VEHICLE, WIDTH, save_npz, scene

SAMPLES = Path(__file__).parents[2] / "data" / "evs-samples" / "event_camera_codecs"
PROPHESEE_BAG = SAMPLES / "test_data_evt3_trigger" / "test_data_evt3_trigger_0.db3"
SOURCE = SourceRef(
    uri=None, format="npz", offset_unit="event", recording="abc123", sha256="abc123" + "0" * 58
)


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
    return run_with_stats(events, chunk=chunk, clock=clock, sensor=sensor, settings=settings)[0]


def run_with_stats(
    events: Events,
    *,
    chunk: int = 4096,
    clock: ClockDomain = ClockDomain.SENSOR,
    sensor: str = "gate-1",
    settings: BridgeSettings | None = None,
) -> tuple[ListSink, PipelineStats]:
    sink = ListSink()
    pipeline = build_pipeline(
        sensor, SOURCE, clock, width=WIDTH, height=HEIGHT, sink=sink, settings=settings
    )
    for start in range(0, len(events), chunk):
        pipeline.feed(EventChunk(events[start : start + chunk], start, start + chunk))
    pipeline.finish()
    return sink, pipeline.stats


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
            "format": "npz",
            "offsets": [0, 10**6],
            "offset_unit": "event",
            "sha256": SOURCE.sha256,
        }
        assert data["clock"] == "sensor"
        assert "time" not in segment

    def test_the_unix_clock_gives_a_time_derived_from_the_sensor(self) -> None:
        events = scene([VEHICLE])
        events["t"] += 1_702_309_120_000_000
        segment = run(events, clock=ClockDomain.UNIX).of_type("evs.segment.recorded")[0]
        assert segment["time"] == rfc3339_us(segment["data"]["window"]["start_us"])
        assert segment["time"] == "2023-12-11T15:38:41.000000Z"
        assert segment["id"] == "evs:gate-1:abc123:seg:1702309121000000"
        assert segment["correlationid"] == "evs:gate-1:abc123"

    def test_sustained_activity_is_signalled_once_per_run(self) -> None:
        sink = run(scene([PERSON]))
        [sustained] = sink.of_type("evs.activity.sustained")
        causes = sustained["causationid"].split(",")
        assert len(causes) == 10
        assert causes[0] == "evs:gate-1:abc123:act:1000000:0"
        assert sustained["data"]["windows"] == 10
        assert sustained["priority"] == 2

    @pytest.mark.parametrize("start_us", [-40_000, -20_000, 0])
    def test_a_run_says_when_it_began_before_the_sensors_zero_too(self, start_us: int) -> None:
        sink = run(scene([PERSON], start_us=start_us))
        [sustained] = sink.of_type("evs.activity.sustained")
        first = sink.of_type("evs.activity.detected")[0]
        assert sustained["data"]["since_us"] == first["data"]["window"]["start_us"] == start_us

    @pytest.mark.parametrize("clock", [ClockDomain.SENSOR, ClockDomain.UNIX])
    def test_attributes_stay_inside_the_store_limit(self, clock: ClockDomain) -> None:
        # The longest sensor id and run: a sustained event's causes are cut to fit. Under
        # the unix clock its time took it 34 bytes past (a fixed budget for its causes).
        events = scene([FACE, VEHICLE, PERSON])
        if clock is ClockDomain.UNIX:
            events["t"] += 1_764_500_000_000_000  # 2025-11-30
        settings = BridgeSettings(run="r" * 64)
        sink = run(events, sensor="s" * 64, settings=settings, clock=clock)
        assert sink.of_type("evs.activity.sustained")
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


class TestRerunElsewhere:
    @pytest.mark.parametrize("clock_offset_us", [0, 1_702_309_120_000_000])
    def test_a_renamed_moved_file_gives_the_same_bytes(
        self, tmp_path: Path, clock_offset_us: int
    ) -> None:
        events = scene([FACE, PERSON])
        events["t"] += clock_offset_us  # the unix clock too (npz times after 2001)
        first = save_npz(tmp_path / "gate.npz", events)
        (tmp_path / "moved").mkdir()
        second = Path(shutil.copy(first, tmp_path / "moved" / "other-name.npz"))
        made = []
        for path in (first, second):
            sink = ListSink()
            send_recording(path, "gate-1", sink)
            made.append([orjson.dumps(e) for e, _ in sink.events])
        assert made[0] == made[1]
        assert made[0]
        for line in made[0]:
            assert b"gate.npz" not in line
            assert b"other-name" not in line
        event = orjson.loads(made[0][0])
        assert event["id"].split(":")[2] == event["data"]["dataref"]["sha256"][:12]
        assert event["correlationid"] == ":".join(event["id"].split(":")[:3])
        assert "uri" not in event["data"]["dataref"]


class TestAdmission:
    def test_events_outside_the_geometry_are_dropped_and_counted(self) -> None:
        events = scene([FACE])
        clean, clean_stats = run_with_stats(events)
        wild = events.copy()
        wild["x"][::1000] = WIDTH + 5
        wild["y"][1::1000] = 60_000
        _, stats = run_with_stats(wild)
        assert stats.out_of_geometry == len(events[::1000]) + len(events[1::1000])
        assert stats.events_in == clean_stats.events_in - stats.out_of_geometry
        assert clean.of_type("evs.activity.detected")

    def test_one_wild_timestamp_is_an_outlier(self) -> None:
        events = scene([FACE, PERSON])
        clean = run(events)
        wild = events.copy()
        wild["t"][len(events) // 5] += 3_600_000_000  # one hour ahead
        sink, stats = run_with_stats(wild)
        assert stats.outliers == 1
        kept = np.delete(events, len(events) // 5)
        assert sink.events == run(kept).events
        assert len(sink.of_type("evs.segment.recorded")) == len(
            clean.of_type("evs.segment.recorded")
        )

    def test_a_jump_confirmed_by_later_events_is_followed(self) -> None:
        before = scene([FACE], duration_us=200_000)
        after = scene([FACE], start_us=60_000_000, duration_us=200_000)
        sink, stats = run_with_stats(np.concatenate([before, after]))
        assert stats.outliers == PipelineConfig().jump_confirm_events - 1
        starts = [e["data"]["window"]["start_us"] for e in sink.of_type("evs.segment.recorded")]
        assert starts[0] == 1_000_000
        assert starts[-1] >= 60_000_000

    @pytest.mark.parametrize("chunk", [1, 333, 100_000])
    def test_outliers_do_not_depend_on_the_chunking(self, chunk: int) -> None:
        events = scene([FACE], duration_us=200_000)
        later = scene([FACE], start_us=60_000_000, duration_us=100_000)
        events = np.concatenate([events, later])
        events["t"][[50, 51, 52, 900]] += 10_000_000_000
        if chunk == 1:
            events = events[::7]
        whole = run_with_stats(events, chunk=10**7)
        parts = run_with_stats(events, chunk=chunk)
        assert parts[1].outliers == whole[1].outliers > 0
        assert parts[0].of_type("evs.activity.detected") == whole[0].of_type(
            "evs.activity.detected"
        )

    def test_unix_times_past_year_9999_are_dropped_not_formatted(self) -> None:
        events = scene([VEHICLE])
        events["t"] += 1_702_309_120_000_000
        events["t"][0] = 1 << 62
        events["t"][10] = -5
        sink, stats = run_with_stats(events, clock=ClockDomain.UNIX)
        assert stats.outliers == 2
        assert sink.of_type("evs.segment.recorded")[0]["time"].startswith("2023-12-11T")

    def test_the_last_window_of_year_9999_is_dropped_its_end_being_past_it(self) -> None:
        # An activity is timed at its window's end: 10000-01-01 for the last window.
        events = scene([VEHICLE], start_us=MAX_UNIX_US + 1 - 100_000, duration_us=100_000)
        sink, stats = run_with_stats(events, clock=ClockDomain.UNIX)
        last_window = int(np.count_nonzero(events["t"] > MAX_UNIX_US - 20_000))
        assert stats.outliers == last_window > 0
        times = [e["time"] for e in sink.of_type("evs.activity.detected")]
        assert times
        assert max(times) == "9999-12-31T23:59:59.980000Z"

    def test_formatting_a_time_out_of_range_says_so(self) -> None:
        with pytest.raises(ValueError, match="outside 1970-9999"):
            rfc3339_us(1 << 62)


class NumpyClassifier:
    def __init__(self, confidence: Any) -> None:
        self.confidence = confidence

    def classify(self, region: Region) -> tuple[str, float]:
        return np.str_("face"), self.confidence


class TestClassifierAnswers:
    def test_numpy_scalars_become_json_values(self) -> None:
        settings = BridgeSettings(classifier=NumpyClassifier(np.float32(0.87)))
        activity = run(scene([FACE]), settings=settings).of_type("evs.activity.detected")[0]
        assert activity["data"]["confidence"] == 0.87
        assert type(activity["data"]["label"]) is str
        orjson.dumps(activity)

    @pytest.mark.parametrize("confidence", [1.5, -0.1, float("nan"), "high", None])
    def test_a_confidence_outside_0_1_is_a_clear_error(self, confidence: Any) -> None:
        settings = BridgeSettings(classifier=NumpyClassifier(confidence))
        with pytest.raises(ClassifierError, match="NumpyClassifier"):
            run(scene([FACE]), settings=settings)


def test_a_long_run_keeps_only_the_last_causes() -> None:
    sink, _ = run_with_stats(scene([PERSON], duration_us=2_000_000))
    [sustained] = sink.of_type("evs.activity.sustained")
    assert len(sustained["causationid"].split(",")) == 10
