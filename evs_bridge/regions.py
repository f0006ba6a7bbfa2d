"""Activity regions in one window, and tracks that follow them from window to window.

Finding regions (``find_regions``): the window's filtered events are counted on a grid of
``cell_px`` by ``cell_px`` cells (8 px by default: a sparse event cloud becomes connected
without joining two objects a few cells apart); a cell is active with at least
``min_cell_events`` events; active cells are joined by 8-connectivity
(``scipy.ndimage.label``); a component is a region when its cells hold at least
``min_region_events`` events. A region's box, count and centroid are computed from its
events, in pixels. Regions are numbered in ``ndimage.label``'s raster order (top-left
first), which, like everything here, depends only on the events: a re-run numbers them the
same way.

Tracking (``Tracker``): each region is matched to a region of the most recent earlier
window with regions (at most ``max_gap_windows`` back) whose centroid is within
``max_speed_px_s`` times the elapsed time; pairs are taken greedily, closest first (ties broken by
index), one to one. A matched region continues that track and gets the velocity of its
centroid since then, in px/s; an unmatched one starts a track named after its window and
index (``<window start µs>.<index>``) with zero velocity. A centroid jitters by a pixel or
two between windows, which at 20 ms is +-100 px/s, so after a track's first step the
velocity is smoothed exponentially: ``v = smoothing * step + (1 - smoothing) * v_before``
(``smoothing`` 0.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import ndimage  # type: ignore[import-untyped]  # scipy ships no stubs

from evs_bridge.events import Events

_EIGHT_CONNECTED = np.ones((3, 3), dtype=bool)


@dataclass(frozen=True, slots=True)
class RegionParams:
    cell_px: int = 8
    min_cell_events: int = 3
    min_region_events: int = 30

    def __post_init__(self) -> None:
        if self.cell_px <= 0 or self.min_cell_events <= 0 or self.min_region_events <= 0:
            raise ValueError("region parameters must be positive")


@dataclass(frozen=True, slots=True)
class Box:
    """Pixel bounds, inclusive on both ends."""

    x0: int
    y0: int
    x1: int
    y1: int

    @property
    def width(self) -> int:
        return self.x1 - self.x0 + 1

    @property
    def height(self) -> int:
        return self.y1 - self.y0 + 1


@dataclass(frozen=True, slots=True)
class Region:
    """One region of activity in one window; tracking fills in ``track`` and velocity."""

    window_index: int
    window_start_us: int
    window_end_us: int
    index: int
    box: Box
    event_count: int
    centroid_x: float
    centroid_y: float
    on_fraction: float
    """The share of positive-polarity events (moving edges give a mix of both)."""
    track: str = ""
    age: int = 0
    """How many earlier windows of the track were seen (0: it starts here)."""
    velocity_x: float = 0.0
    velocity_y: float = 0.0

    @property
    def speed_px_s(self) -> float:
        return math.hypot(self.velocity_x, self.velocity_y)

    @property
    def density(self) -> float:
        """Events per pixel of the box."""
        return self.event_count / (self.box.width * self.box.height)


def find_regions(
    events: Events,
    width: int,
    height: int,
    *,
    window_index: int,
    window_start_us: int,
    window_end_us: int,
    params: RegionParams | None = None,
) -> list[Region]:
    """The regions of one window's (filtered) events, numbered in raster order."""
    params = params or RegionParams()
    if len(events) < params.min_region_events:
        return []
    cell = params.cell_px
    rows, cols = -(-height // cell), -(-width // cell)
    cy = np.minimum(events["y"].astype(np.intp) // cell, rows - 1)
    cx = np.minimum(events["x"].astype(np.intp) // cell, cols - 1)
    flat = cy * cols + cx
    counts = np.bincount(flat, minlength=rows * cols).reshape(rows, cols)
    labels, found = ndimage.label(counts >= params.min_cell_events, structure=_EIGHT_CONNECTED)
    if found == 0:
        return []
    event_label = labels.ravel()[flat]
    inside = event_label > 0
    chosen = events[inside]
    chosen_label = event_label[inside]
    order = np.argsort(chosen_label, kind="stable")
    chosen, chosen_label = chosen[order], chosen_label[order]
    bounds = np.searchsorted(chosen_label, np.arange(1, found + 2))
    regions: list[Region] = []
    for label in range(found):
        part = chosen[bounds[label] : bounds[label + 1]]
        if len(part) < params.min_region_events:
            continue
        xs, ys = part["x"], part["y"]
        regions.append(
            Region(
                window_index=window_index,
                window_start_us=window_start_us,
                window_end_us=window_end_us,
                index=len(regions),
                box=Box(int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())),
                event_count=len(part),
                centroid_x=round(float(xs.mean()), 2),
                centroid_y=round(float(ys.mean()), 2),
                on_fraction=round(float(part["p"].mean()), 3),
            )
        )
    return regions


@dataclass(frozen=True, slots=True)
class TrackParams:
    max_speed_px_s: float = 5000.0
    max_gap_windows: int = 3
    smoothing: float = 0.3


class Tracker:
    """Gives each window's regions a track and a velocity; feed windows in time order."""

    def __init__(self, window_us: int, params: TrackParams | None = None) -> None:
        self._window_us = window_us
        self._params = params or TrackParams()
        self._last: list[Region] = []

    def update(self, regions: list[Region]) -> list[Region]:
        if not regions:
            return []
        current = regions[0].window_index
        previous = [
            r for r in self._last if 0 < current - r.window_index <= self._params.max_gap_windows
        ]
        pairs: list[tuple[float, int, int]] = []
        for j, region in enumerate(regions):
            for i, before in enumerate(previous):
                elapsed_s = (current - before.window_index) * self._window_us / 1e6
                distance = math.hypot(
                    region.centroid_x - before.centroid_x, region.centroid_y - before.centroid_y
                )
                if distance <= self._params.max_speed_px_s * elapsed_s:
                    pairs.append((distance, i, j))
        pairs.sort()
        matched: dict[int, Region] = {}
        taken: set[int] = set()
        for _, i, j in pairs:
            if j in matched or i in taken:
                continue
            matched[j] = previous[i]
            taken.add(i)
        tracked: list[Region] = []
        for j, region in enumerate(regions):
            if j not in matched:
                tracked.append(replace(region, track=f"{region.window_start_us}.{region.index}"))
                continue
            before = matched[j]
            elapsed_s = (current - before.window_index) * self._window_us / 1e6
            vx = (region.centroid_x - before.centroid_x) / elapsed_s
            vy = (region.centroid_y - before.centroid_y) / elapsed_s
            if before.age > 0:
                k = self._params.smoothing
                vx = k * vx + (1 - k) * before.velocity_x
                vy = k * vy + (1 - k) * before.velocity_y
            tracked.append(
                replace(
                    region,
                    track=before.track,
                    age=before.age + 1,
                    velocity_x=round(vx, 1),
                    velocity_y=round(vy, 1),
                )
            )
        self._last = tracked
        return tracked
