"""Regions on the count map, and tracks with velocities in px/s."""

from __future__ import annotations

import numpy as np

from evs_bridge.events import EVENT_DTYPE, Events
from evs_bridge.regions import Region, RegionParams, Tracker, find_regions


def square(x0: int, y0: int, side: int, *, t: int = 0) -> Events:
    ys, xs = np.mgrid[y0 : y0 + side, x0 : x0 + side]
    events = np.zeros(xs.size, dtype=EVENT_DTYPE)
    events["x"], events["y"], events["t"] = xs.ravel(), ys.ravel(), t
    events["p"] = np.arange(xs.size) % 2
    return events


def regions_of(events: Events, window: int = 0, **params: int) -> list[Region]:
    return find_regions(
        events,
        320,
        240,
        window_index=window,
        window_start_us=window * 20_000,
        window_end_us=(window + 1) * 20_000,
        params=RegionParams(**params),
    )


class TestFindRegions:
    def test_a_dense_square_is_one_region_with_its_box_and_centroid(self) -> None:
        [region] = regions_of(square(40, 60, 16))
        assert (region.box.x0, region.box.y0, region.box.width, region.box.height) == (
            40,
            60,
            16,
            16,
        )
        assert (region.event_count, region.centroid_x, region.centroid_y) == (256, 47.5, 67.5)
        assert region.on_fraction == 0.5

    def test_two_apart_are_two_regions_numbered_in_raster_order(self) -> None:
        events = np.concatenate([square(200, 20, 16), square(10, 150, 16)])
        regions = regions_of(events)
        assert [(r.index, r.box.x0) for r in regions] == [(0, 200), (1, 10)]

    def test_sparse_noise_makes_no_region(self) -> None:
        rng = np.random.default_rng(1)
        events = np.zeros(200, dtype=EVENT_DTYPE)
        events["x"], events["y"] = rng.integers(0, 320, 200), rng.integers(0, 240, 200)
        assert regions_of(events) == []

    def test_too_few_events_make_no_region(self) -> None:
        assert regions_of(square(0, 0, 4), min_cell_events=1, min_region_events=17) == []
        assert len(regions_of(square(0, 0, 4), min_cell_events=1, min_region_events=16)) == 1


class TestTracker:
    def test_a_moving_square_keeps_its_track_and_gets_its_speed(self) -> None:
        tracker = Tracker(20_000)
        tracked = [tracker.update(regions_of(square(40 + 2 * k, 60, 16), k)) for k in range(4)]
        tracks = {r[0].track for r in tracked}
        assert tracks == {"0.0"}
        assert tracked[0][0].velocity_x == 0.0
        assert tracked[1][0].velocity_x == 100.0  # 2 px per 20 ms
        assert tracked[3][0].velocity_x == 100.0
        assert tracked[3][0].age == 3

    def test_a_region_too_far_away_starts_a_new_track(self) -> None:
        tracker = Tracker(20_000)
        tracker.update(regions_of(square(10, 10, 16), 0))
        [far] = tracker.update(regions_of(square(290, 200, 16), 1))
        assert (far.track, far.velocity_x) == ("20000.0", 0.0)

    def test_a_gap_of_a_few_windows_is_bridged_with_the_right_speed(self) -> None:
        tracker = Tracker(20_000)
        tracker.update(regions_of(square(40, 60, 16), 0))
        [later] = tracker.update(regions_of(square(46, 60, 16), 3))
        assert (later.track, later.velocity_x) == ("0.0", 100.0)
