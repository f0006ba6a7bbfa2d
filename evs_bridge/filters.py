"""Noise filters, applied chunk after chunk: hot pixels first, then background activity.

Both filters are stateful objects whose ``apply(events)`` returns the kept events of one chunk
in their original order. Their state is carried across calls, and each decision depends only on
the events before it in stream order, so the output never depends on how the stream was cut
into chunks (the unit tests compare chunkings down to one event per call).

``BackgroundActivityFilter`` - the exact rule:
    keep event ``e`` when, for some pixel ``q`` in the 4- or 8-neighbourhood of ``e``'s pixel
    (never the pixel itself), the last event on ``q`` that comes before ``e`` in stream order has
    ``e.t - t_q < dt_us``.
Ties: "before" means earlier in stream order, so an event on a neighbour with the same
timestamp but earlier in the stream supports ``e`` (``0 < dt``), and one later in the stream
does not. A pixel that has not fired yet supports nothing. This is dv-processing's
``BackgroundActivityNoiseFilter`` (8-neighbourhood) and tonic's ``Denoise`` (4-neighbourhood)
event for event, with one difference: both start from a zeroed time surface, so while
``t < dt`` they count every pixel as having fired at t = 0; for ``t >= dt`` the outputs agree.

Backends: ``"numpy"`` (default, no extra dependency) works on internal pieces of
``_PIECE_EVENTS`` events: a per-pixel last-timestamp map (padded by one pixel on each side, so
neighbours need no border tests) supplies support from earlier pieces, and inside a piece the
events are sorted by (pixel, stream index); for each neighbour offset one ``searchsorted`` finds
the last earlier event on the neighbour. ``"numba"`` runs the per-event loop compiled; numba is
imported only when that backend is asked for.

``HotPixelFilter`` - the rule (see its docstring) drops pixels whose event count in a time
window is far above the median count of the pixels active in a window.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from types import ModuleType

import numpy as np
import numpy.typing as npt

from evs_bridge.events import Events

_NEVER = np.int64(-(1 << 62))
"""The last timestamp of a pixel that has not fired: no event is within ``dt`` of it."""
_PIECE_BITS = 12
_PIECE_EVENTS = 1 << _PIECE_BITS
"""numpy backend work size: sorting and searching stay in cache (CPU time measured here: 4k
events best, 16k 5-10 % slower, 64k 20 % slower)."""

_OFFSETS_4 = ((-1, 0), (1, 0), (0, -1), (0, 1))
_OFFSETS_8 = ((-1, -1), (0, -1), (1, -1), (-1, 0), (1, 0), (-1, 1), (0, 1), (1, 1))

Int64s = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


class BackendUnavailable(RuntimeError):
    """The accelerated backend was asked for but its package is not installed."""


@dataclass(slots=True)
class FilterCounts:
    """Events seen and kept by a filter since it was made."""

    events_in: int = 0
    events_out: int = 0


class BackgroundActivityFilter:
    """Keep an event only when a neighbouring pixel fired less than ``dt_us`` before it."""

    def __init__(
        self,
        width: int,
        height: int,
        *,
        dt_us: int = 2000,
        neighbourhood: int = 8,
        backend: str = "numpy",
    ) -> None:
        if neighbourhood not in (4, 8):
            raise ValueError(f"neighbourhood must be 4 or 8, not {neighbourhood}")
        if backend not in ("numpy", "numba"):
            raise ValueError(f"backend must be 'numpy' or 'numba', not {backend!r}")
        if dt_us <= 0:
            raise ValueError(f"dt_us must be positive, not {dt_us}")
        self.width = width
        self.height = height
        self.dt_us = dt_us
        self.neighbourhood = neighbourhood
        self.backend = backend
        self.counts = FilterCounts()
        self._stride = width + 2
        # One pixel of padding all round: a neighbour off the sensor is a padding pixel that
        # never fires, so no border tests are needed.
        self._last = np.full((height + 2) * self._stride, _NEVER, dtype=np.int64)
        offsets = _OFFSETS_8 if neighbourhood == 8 else _OFFSETS_4
        self._offsets = np.array([dy * self._stride + dx for dx, dy in offsets], dtype=np.int64)
        self._kernel = _numba_kernel() if backend == "numba" else None

    def apply(self, events: Events) -> Events:
        keep = self.keep_mask(events)
        return events[keep]

    def keep_mask(self, events: Events) -> Bools:
        """Which events of the chunk to keep (the filter's state advances past them)."""
        n = len(events)
        keep = np.empty(n, dtype=np.bool_)
        if n == 0:
            return keep
        # Refuse a bad chunk before any state changes.
        if int(events["x"].max()) >= self.width or int(events["y"].max()) >= self.height:
            raise ValueError(f"events outside the {self.width}x{self.height} sensor")
        self.counts.events_in += n
        if self._kernel is not None:
            # The kernel reads the fields in place (no temporaries); its own bounds check only
            # guards memory.
            bad = self._kernel(
                events["x"],
                events["y"],
                events["t"],
                self.width,
                self.height,
                self._stride,
                self._last,
                self._offsets,
                self.dt_us,
                keep,
            )
            if bad >= 0:
                raise ValueError(f"events outside the {self.width}x{self.height} sensor")
        else:
            # Piece by piece: the temporaries of a piece stay in cache.
            for start in range(0, n, _PIECE_EVENTS):
                piece = events[start : start + _PIECE_EVENTS]
                keep[start : start + len(piece)] = self._keep_piece(
                    self._pixels(piece), piece["t"].astype(np.int64)
                )
        self.counts.events_out += int(np.count_nonzero(keep))
        return keep

    def _pixels(self, events: Events) -> Int64s:
        x = events["x"].astype(np.int64)
        y = events["y"].astype(np.int64)
        return (y + 1) * self._stride + (x + 1)

    def _keep_piece(self, pixels: Int64s, times: Int64s) -> Bools:
        n = len(pixels)
        # Unique keys ordered by pixel, then by stream index (pixel << _PIECE_BITS | index): a
        # plain sort, no argsort. A sentinel key in front (pixel -1, never a neighbour) makes
        # every search land on a row.
        keys = np.empty(n + 1, dtype=np.int64)
        keys[0] = -1
        keys[1:] = np.sort((pixels << _PIECE_BITS) | np.arange(n, dtype=np.int64))
        order = keys[1:] & (_PIECE_EVENTS - 1)
        pixel_sorted = keys >> _PIECE_BITS
        time_sorted = np.empty(n + 1, dtype=np.int64)
        time_sorted[1:] = times[order]
        own_keys, own_pixels, own_times = keys[1:], pixel_sorted[1:], time_sorted[1:]
        # Some neighbour fired less than dt ago exactly when the newest of them did.
        newest = np.full(n, _NEVER, dtype=np.int64)
        for offset in self._offsets:
            neighbour = own_pixels + offset
            # The last event on ``neighbour`` before this one in stream order, if in this piece,
            # else the neighbour's last timestamp from earlier pieces.
            found = np.searchsorted(keys, own_keys + (offset << _PIECE_BITS)) - 1
            inside = pixel_sorted[found] == neighbour
            np.maximum(
                newest, np.where(inside, time_sorted[found], self._last[neighbour]), out=newest
            )
        supported = own_times - newest < self.dt_us
        # The last event of each pixel in this piece becomes that pixel's last timestamp.
        ends = np.flatnonzero(np.diff(own_pixels, append=-1) != 0)
        self._last[own_pixels[ends]] = own_times[ends]
        keep = np.empty(n, dtype=np.bool_)
        keep[order] = supported
        return keep


Kernel = Callable[
    [
        npt.NDArray[np.uint16],
        npt.NDArray[np.uint16],
        Int64s,
        int,
        int,
        int,
        Int64s,
        Int64s,
        int,
        Bools,
    ],
    int,
]


def _ba_loop(
    x: npt.NDArray[np.uint16],
    y: npt.NDArray[np.uint16],
    t: Int64s,
    width: int,
    height: int,
    stride: int,
    last: Int64s,
    offsets: Int64s,
    dt: int,
    keep: Bools,
) -> int:
    """The per-event loop the numba backend compiles (the rule in its plainest form).

    Returns the index of the first event outside the sensor (state untouched), else -1.
    """
    for i in range(len(t)):
        if x[i] >= width or y[i] >= height:
            return i
    for i in range(len(t)):
        pixel = (np.int64(y[i]) + 1) * stride + np.int64(x[i]) + 1
        newest = last[pixel + offsets[0]]
        for j in range(1, len(offsets)):
            newest = max(newest, last[pixel + offsets[j]])
        keep[i] = t[i] - newest < dt
        last[pixel] = t[i]
    return -1


def check_backend(backend: str) -> None:
    """Raise ``BackendUnavailable`` now if ``backend`` cannot run (numba not installed)."""
    if backend == "numba":
        _numba_kernel()


def _numba_kernel() -> Kernel:
    try:
        import numba  # optional accelerator: imported only when that backend is asked for
    except ImportError as exc:
        raise BackendUnavailable(
            "backend='numba' needs the numba package (pip install numba); "
            "the default backend='numpy' needs nothing extra"
        ) from exc
    return _compiled(numba)


@cache
def _compiled(numba: ModuleType) -> Kernel:
    """Compiled once per process (and cached on disk by numba), shared by every filter."""
    kernel: Kernel = numba.njit(cache=True, nogil=True)(_ba_loop)
    return kernel


class HotPixelFilter:
    """Drop the events of pixels that fire far above the median pixel rate.

    Time is cut into windows of ``window_us`` that start at multiples of ``window_us`` in the
    sensor's own time (like the segments: never aligned on the first event seen, so a re-run
    from any point of a stream cuts the same windows). In each window a pixel may pass at most
    ``limit`` events, where ``limit`` is the larger of ``min_rate_hz * window`` and ``factor``
    times the median count of the pixels active in the previous window. The first window has
    no median yet, so nothing is dropped in it. When a window closes, every pixel that
    exceeded that window's limit (in the first window: the limit its own median gives) is
    marked hot and all its events in the next window are dropped, so a steady hot pixel loses
    everything after the window in which it was first caught. Counts are kept in stream order,
    so the result does not depend on chunking. Defaults: 1 s windows, 100x the median, at
    least 100 Hz. On the iniVation sample this marks (639, 478) at 5.1 kHz and 66 other
    pixels hot (12.3 % of the events dropped); (639, 478) passes the 1,218 events it fired in
    the first (partial) window. On the Prophesee sample nothing is dropped.
    """

    def __init__(
        self,
        width: int,
        height: int,
        *,
        window_us: int = 1_000_000,
        factor: float = 100.0,
        min_rate_hz: float = 100.0,
    ) -> None:
        if window_us <= 0 or factor <= 0 or min_rate_hz < 0:
            raise ValueError("window_us and factor must be positive, min_rate_hz not negative")
        self.width = width
        self.height = height
        self.window_us = window_us
        self.factor = factor
        self.floor = max(1, int(min_rate_hz * window_us / 1_000_000))
        self.counts = FilterCounts()
        self._window_counts = np.zeros(width * height, dtype=np.int64)
        self._hot = np.zeros(width * height, dtype=np.bool_)
        self._limit: int | None = None  # None: no median yet, nothing is dropped
        self._window: int | None = None

    @property
    def hot_pixels(self) -> list[tuple[int, int]]:
        """The pixels marked hot at the last window close, as ``(x, y)``."""
        flat = np.flatnonzero(self._hot)
        return [(int(p % self.width), int(p // self.width)) for p in flat]

    def apply(self, events: Events) -> Events:
        return events[self.keep_mask(events)]

    def keep_mask(self, events: Events) -> Bools:
        n = len(events)
        if n == 0:
            return np.zeros(0, dtype=np.bool_)
        x = events["x"].astype(np.int64)
        y = events["y"].astype(np.int64)
        if int(x.max()) >= self.width or int(y.max()) >= self.height:
            raise ValueError(f"events outside the {self.width}x{self.height} sensor")
        self.counts.events_in += n
        pixels = y * self.width + x
        times = events["t"].astype(np.int64, copy=False)
        # Window of each event; a running maximum so sensor jitter never reopens a window.
        windows = np.maximum.accumulate(times // self.window_us)
        if self._window is None:
            self._window = int(windows[0])
        np.maximum(windows, self._window, out=windows)
        keep = np.empty(n, dtype=np.bool_)
        cuts = np.flatnonzero(np.diff(windows)) + 1
        for start, end in zip(
            np.concatenate([[0], cuts]), np.concatenate([cuts, [n]]), strict=True
        ):
            window = int(windows[start])
            if window != self._window:
                self._close_window(window)
            keep[start:end] = self._keep_segment(pixels[start:end])
        self.counts.events_out += int(np.count_nonzero(keep))
        return keep

    def _keep_segment(self, pixels: Int64s) -> Bools:
        before = self._window_counts[pixels]
        np.add.at(self._window_counts, pixels, 1)
        keep = ~self._hot[pixels]
        if self._limit is None:
            return keep
        # Only pixels that end the segment above the limit need each event's running count.
        risky = np.flatnonzero(self._window_counts[pixels] > self._limit)
        if len(risky):
            order = np.argsort(pixels[risky], kind="stable")
            sorted_pixels = pixels[risky][order]
            starts = np.flatnonzero(np.diff(sorted_pixels, prepend=-1) != 0)
            runs = np.diff(np.append(starts, len(order)))
            running = np.empty(len(order), dtype=np.int64)
            running[order] = np.arange(len(order)) - np.repeat(starts, runs) + 1
            keep[risky] &= before[risky] + running <= self._limit
        return keep

    def _close_window(self, window: int) -> None:
        active = self._window_counts[self._window_counts > 0]
        median = float(np.median(active)) if len(active) else 0.0
        limit = max(self.floor, int(self.factor * median))
        self._hot = self._window_counts > limit
        self._limit = limit
        self._window_counts[:] = 0
        self._window = window
