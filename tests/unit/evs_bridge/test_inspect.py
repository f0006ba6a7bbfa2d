"""``summarise`` on the real recordings: what ``causeway evs inspect`` prints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evs_bridge.events import EVENT_DTYPE, ClockDomain
from evs_bridge.inspect import summarise

SAMPLES = Path(__file__).parents[2] / "data" / "evs-samples" / "event_camera_codecs"
EVT3_BAG = SAMPLES / "test_data_evt3_trigger" / "test_data_evt3_trigger_0.db3"
LIBCAER_BAG = SAMPLES / "test_data_libcaer_rollover" / "libcaer_rollover_0.db3"


class TestSummarise:
    def test_prophesee_bag(self) -> None:
        summary = summarise(EVT3_BAG)
        assert (summary.sensor, summary.width, summary.height) == ("prophesee-evt3", 1280, 720)
        assert (summary.format, summary.clock) == ("rosbag2-evt3", ClockDomain.SENSOR)
        assert (summary.events, summary.triggers, summary.on_events) == (82469, 2, 41439)
        assert (summary.first_t_us, summary.last_t_us) == (14224870, 15476187)
        assert summary.duration_s == pytest.approx(1.251317)
        assert summary.mean_rate_hz == pytest.approx(82469 / 1.251317)
        assert summary.mean_rate_hz < summary.peak_rate_hz

    def test_inivation_bag(self) -> None:
        summary = summarise(LIBCAER_BAG)
        assert (summary.sensor, summary.width, summary.height) == ("inivation-libcaer", 640, 480)
        assert (summary.clock, summary.events, summary.triggers) == (ClockDomain.UNIX, 334331, 0)
        assert summary.duration_s == pytest.approx(2.0, abs=1e-3)
        assert summary.mean_rate_hz == pytest.approx(167_167, rel=1e-3)

    def test_peak_rate_is_the_busiest_bin(self, tmp_path: Path) -> None:
        events = np.zeros(40, dtype=EVENT_DTYPE)
        events["t"] = [0] * 10 + [15_000] * 25 + [35_000] * 5
        path = tmp_path / "events.npy"
        np.save(path, events)
        summary = summarise(path, bin_us=10_000)
        assert summary.peak_rate_hz == 25 / 0.01
        assert summary.duration_s == 0.035

    def test_empty_recording(self, tmp_path: Path) -> None:
        path = tmp_path / "empty.npy"
        np.save(path, np.zeros(0, dtype=EVENT_DTYPE))
        summary = summarise(path)
        assert (summary.events, summary.duration_s, summary.peak_rate_hz) == (0, 0.0, 0.0)
        assert summary.first_t_us is None
