"""Noise filters: the background-activity filter against a per-event reference loop, whatever
the chunking and backend; the hot-pixel filter on the real iniVation hot pixel."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from evs_bridge.decoders import open_recording
from evs_bridge.events import EVENT_DTYPE, Events
from evs_bridge.filters import BackendUnavailable, BackgroundActivityFilter, HotPixelFilter

SAMPLES = Path(__file__).parents[2] / "data" / "evs-samples" / "event_camera_codecs"
PROPHESEE = SAMPLES / "prophesee1280x720_evt3_xypt.npz"
INIVATION = SAMPLES / "dvxplorer640x480_libcaer_xypt.npz"
BACKENDS = ["numpy", "numba"]

Mask = npt.NDArray[np.bool_]


def reference(events: Events, dt_us: int, neighbourhood: int) -> Mask:
    """The rule, one event at a time: a neighbour's last earlier (stream order) event < dt ago."""
    if neighbourhood == 8:
        offsets = [(dx, dy) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dx, dy) != (0, 0)]
    else:
        offsets = [(-1, 0), (1, 0), (0, -1), (0, 1)]
    last: dict[tuple[int, int], int] = {}
    keep = []
    for x, y, _, t in events.tolist():
        keep.append(
            any(
                (x + dx, y + dy) in last and t - last[(x + dx, y + dy)] < dt_us
                for dx, dy in offsets
            )
        )
        last[(x, y)] = t
    return np.array(keep, dtype=np.bool_)


def random_events(n: int, width: int, height: int, *, span_us: int, seed: int) -> Events:
    rng = np.random.default_rng(seed)
    events = np.empty(n, dtype=EVENT_DTYPE)
    events["x"] = rng.integers(0, width, n)
    events["y"] = rng.integers(0, height, n)
    events["p"] = rng.integers(0, 2, n)
    # A small span gives many equal timestamps, so the tie rule is exercised.
    events["t"] = np.sort(rng.integers(0, span_us, n))
    return events


def load(path: Path) -> Events:
    return np.concatenate([c.events for c in open_recording(path).chunks()])


def chunked(
    make: Callable[[], BackgroundActivityFilter | HotPixelFilter], events: Events, size: int
) -> Mask:
    flt = make()
    if size >= len(events):
        return flt.keep_mask(events)
    return np.concatenate(
        [flt.keep_mask(events[i : i + size]) for i in range(0, len(events), size)]
    )


class TestBackgroundActivity:
    @pytest.mark.parametrize("backend", BACKENDS)
    @pytest.mark.parametrize("neighbourhood", [4, 8])
    @pytest.mark.parametrize("size", [1, 7, 333, 16385, 1 << 30])
    def test_random_data_matches_reference_whatever_the_chunking(
        self, backend: str, neighbourhood: int, size: int
    ) -> None:
        n = 3000 if size == 1 else 40000
        events = random_events(n, 24, 17, span_us=n * 8, seed=size + neighbourhood)
        expected = reference(events, 2000, neighbourhood)
        assert 0 < expected.sum() < n
        got = chunked(
            lambda: BackgroundActivityFilter(24, 17, neighbourhood=neighbourhood, backend=backend),
            events,
            size,
        )
        assert np.array_equal(got, expected)

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_unsorted_times_follow_stream_order(self, backend: str) -> None:
        events = random_events(5000, 10, 10, span_us=40000, seed=3)
        np.random.default_rng(4).shuffle(events)
        expected = reference(events, 700, 8)
        got = chunked(
            lambda: BackgroundActivityFilter(10, 10, dt_us=700, backend=backend), events, 999
        )
        assert np.array_equal(got, expected)

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_ties_support_only_events_later_in_the_stream(self, backend: str) -> None:
        events = np.array([(5, 5, 1, 100), (6, 5, 1, 100), (9, 9, 0, 100)], dtype=EVENT_DTYPE)
        flt = BackgroundActivityFilter(16, 16, backend=backend)
        assert flt.keep_mask(events).tolist() == [False, True, False]

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_window_is_strict_and_own_pixel_never_supports(self, backend: str) -> None:
        events = np.array(
            [(5, 5, 1, 0), (5, 5, 1, 10), (4, 4, 1, 1999), (6, 6, 0, 3999), (7, 7, 0, 5998)],
            dtype=EVENT_DTYPE,
        )
        flt = BackgroundActivityFilter(16, 16, dt_us=2000, backend=backend)
        assert flt.keep_mask(events).tolist() == [False, False, True, False, True]
        assert (flt.counts.events_in, flt.counts.events_out) == (5, 2)

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_borders_do_not_wrap_to_the_next_row(self, backend: str) -> None:
        # (0, 1)'s left neighbour would be (9, 0) if pixels were flattened without padding.
        events = np.array(
            [(9, 0, 1, 0), (0, 1, 1, 5), (9, 9, 1, 6), (0, 0, 1, 7)], dtype=EVENT_DTYPE
        )
        flt = BackgroundActivityFilter(10, 10, backend=backend)
        assert flt.keep_mask(events).tolist() == [False, False, False, True]

    @pytest.mark.parametrize("backend", BACKENDS)
    @pytest.mark.parametrize(("path", "kept"), [(PROPHESEE, 628), (INIVATION, 4758)])
    def test_real_recordings_keep_the_measured_counts(
        self, backend: str, path: Path, kept: int
    ) -> None:
        events = load(path)
        info = open_recording(path).info
        masks = [
            chunked(
                lambda: BackgroundActivityFilter(info.width, info.height, backend=backend),
                events,
                size,
            )
            for size in (4097, 65536, 1 << 30)
        ]
        assert int(masks[0].sum()) == kept
        assert all(np.array_equal(m, masks[0]) for m in masks)

    @pytest.mark.parametrize("path", [PROPHESEE, INIVATION])
    @pytest.mark.parametrize("neighbourhood", [4, 8])
    def test_real_recordings_match_reference(self, path: Path, neighbourhood: int) -> None:
        events = load(path)[:40000]
        info = open_recording(path).info
        got = chunked(
            lambda: BackgroundActivityFilter(info.width, info.height, neighbourhood=neighbourhood),
            events,
            1111,
        )
        assert np.array_equal(got, reference(events, 2000, neighbourhood))

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_events_outside_the_sensor_are_refused_before_any_change(self, backend: str) -> None:
        flt = BackgroundActivityFilter(4, 4, backend=backend)
        inside = np.array([(1, 1, 1, 0)], dtype=EVENT_DTYPE)
        with pytest.raises(ValueError, match="outside"):
            flt.apply(np.concatenate([inside, np.array([(4, 0, 1, 5)], dtype=EVENT_DTYPE)]))
        assert flt.counts.events_in == 0
        # (1, 1) did not fire: (2, 2) at t=10 has no support.
        assert flt.keep_mask(np.array([(2, 2, 1, 10)], dtype=EVENT_DTYPE)).tolist() == [False]

    def test_bad_parameters_are_refused(self) -> None:
        with pytest.raises(ValueError, match="neighbourhood"):
            BackgroundActivityFilter(4, 4, neighbourhood=6)
        with pytest.raises(ValueError, match="backend"):
            BackgroundActivityFilter(4, 4, backend="cuda")

    def test_numba_backend_without_numba_says_so(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "numba", None)
        with pytest.raises(BackendUnavailable, match="numba"):
            BackgroundActivityFilter(4, 4, backend="numba")
        BackgroundActivityFilter(4, 4)  # the default needs nothing extra


class TestHotPixel:
    def test_catches_the_inivation_hot_pixel(self) -> None:
        events = load(INIVATION)
        flt = HotPixelFilter(640, 480)
        kept = flt.apply(events)
        assert (639, 478) in flt.hot_pixels
        hot = (events["x"] == 639) & (events["y"] == 478)
        passed = (kept["x"] == 639) & (kept["y"] == 478)
        assert int(hot.sum()) == 10248
        # Only in the first window (up to the next whole second), before a median exists.
        first_window = hot & (events["t"] // 1_000_000 == events["t"][0] // 1_000_000)
        assert int(passed.sum()) == int(first_window.sum()) == 1218
        assert flt.counts.events_in == len(events)
        assert flt.counts.events_out == len(kept)

    def test_leaves_a_quiet_scene_alone(self) -> None:
        events = load(PROPHESEE)
        flt = HotPixelFilter(1280, 720)
        kept = flt.apply(events)
        assert flt.hot_pixels == []
        assert len(kept) == len(events)  # nothing is dropped before a median exists

    @pytest.mark.parametrize("size", [1, 977, 65536])
    def test_result_does_not_depend_on_chunking(self, size: int) -> None:
        events = load(INIVATION)
        if size == 1:
            events = events[(events["x"] > 600) & (events["y"] > 400)]  # one event a call is slow
        whole = HotPixelFilter(640, 480).keep_mask(events)
        assert np.array_equal(chunked(lambda: HotPixelFilter(640, 480), events, size), whole)

    def test_limit_follows_the_median_rate(self) -> None:
        # 50 pixels fire 4 times per window; pixel (0, 0) fires 1000 times: limit = 100 x 4.
        quiet = [(x, 1, 0, w * 1000 + k) for w in range(3) for x in range(50) for k in range(4)]
        loud = [(0, 0, 1, w * 1000 + k % 1000) for w in range(3) for k in range(1000)]
        events = np.array(sorted(quiet + loud, key=lambda e: e[3]), dtype=EVENT_DTYPE)
        flt = HotPixelFilter(64, 4, window_us=1000, factor=100, min_rate_hz=5000)  # floor: 5
        kept = flt.apply(events)
        loud_kept = kept[(kept["x"] == 0) & (kept["y"] == 0)]
        # Window 0: no median yet, all pass; windows 1 and 2: hot from the window before.
        assert flt.floor == 5
        assert len(loud_kept) == 1000
        assert len(kept) - len(loud_kept) == 600
        assert flt.hot_pixels == [(0, 0)]

    def test_windows_are_aligned_to_absolute_time(self) -> None:
        # The stream starts mid-window (t = 1500): the first window ends at 2000, not 2500,
        # so a re-run from another starting point cuts the same windows.
        quiet = [
            (x, 1, 0, 1500 + w * 1000 + k) for w in range(3) for x in range(50) for k in range(4)
        ]
        loud = [(0, 0, 1, 1500 + w * 1000 + k % 500) for w in range(3) for k in range(1000)]
        events = np.array(sorted(quiet + loud, key=lambda e: e[3]), dtype=EVENT_DTYPE)
        flt = HotPixelFilter(64, 4, window_us=1000, factor=100, min_rate_hz=5000)
        keep = flt.keep_mask(events)
        loud_at = (events["x"] == 0) & (events["y"] == 0)
        # [1500, 2000) is the first window (nothing dropped); the loud pixel is hot from 2000.
        assert bool(keep[loud_at & (events["t"] < 2000)].all())
        assert not bool(keep[loud_at & (events["t"] >= 2000)].any())
