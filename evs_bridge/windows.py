"""Cutting a filtered event stream into fixed time windows, grouped into segments.

A window is ``window_us`` long (20 ms by default) and starts at a multiple of ``window_us``
in the sensor's own time, never at "the first event seen": a re-run of the same recording,
with any chunk size, cuts exactly the same windows, which is what makes the lineage event
ids derived from them stable. A segment is ``windows_per_segment`` consecutive windows
(aligned the same way); one ``evs.segment.recorded`` event describes each segment that
received any event, and the activity found in its windows names it as cause.

The cutter counts every stage (events in, after the hot-pixel filter, after the background
filter) per segment, keeps only the filtered events, and closes a segment once an input
event at or after its end has been seen. Decoders deliver time-ordered events; an event
older than the oldest open segment (a "late" event) is counted in that segment rather than
reopening a closed one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from evs_bridge.events import Events, empty_events

DEFAULT_WINDOW_US = 20_000
DEFAULT_WINDOWS_PER_SEGMENT = 5


@dataclass(frozen=True, slots=True)
class Window:
    """One window's filtered events: ``[start_us, end_us)`` in the sensor's clock."""

    index: int
    start_us: int
    end_us: int
    events: Events


@dataclass(frozen=True, slots=True)
class Segment:
    """A closed group of windows, with the counts each pipeline stage left."""

    index: int
    start_us: int
    end_us: int
    events_in: int
    after_hot_pixel: int
    after_background: int
    offset_start: int
    offset_end: int
    windows: tuple[Window, ...]

    @property
    def filter_ratio(self) -> float:
        """The fraction of input events the filters kept (0 when nothing came in)."""
        return self.after_background / self.events_in if self.events_in else 0.0


@dataclass(slots=True)
class _Open:
    events_in: int = 0
    after_hot_pixel: int = 0
    offset_start: int = -1
    offset_end: int = -1
    kept: list[Events] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class WindowSpec:
    window_us: int = DEFAULT_WINDOW_US
    windows_per_segment: int = DEFAULT_WINDOWS_PER_SEGMENT

    def __post_init__(self) -> None:
        if self.window_us <= 0 or self.windows_per_segment <= 0:
            raise ValueError("window_us and windows_per_segment must be positive")

    @property
    def segment_us(self) -> int:
        return self.window_us * self.windows_per_segment


class SegmentCutter:
    """Feed each chunk's three stages; take back the segments that closed."""

    def __init__(self, spec: WindowSpec | None = None) -> None:
        self.spec = spec or WindowSpec()
        self._open: dict[int, _Open] = {}
        # No segment below this index can receive events any more (None: none closed yet).
        # Segment indices are negative for times before the sensor's zero.
        self._oldest_open: int | None = None
        self.late_events = 0

    def feed(
        self,
        raw: Events,
        after_hot_pixel: Events,
        after_background: Events,
        *,
        offset_start: int,
        offset_end: int,
    ) -> list[Segment]:
        """Account one chunk (``raw`` and the subsets the two filters kept) and return
        the segments that can no longer change, oldest first."""
        if len(raw) == 0:
            return []
        seg_us = self.spec.segment_us
        raw_seg = self._segment_of(raw["t"], count_late=True)
        hot_seg = self._segment_of(after_hot_pixel["t"])
        kept_seg = self._segment_of(after_background["t"])
        for index, count in _counts(raw_seg):
            entry = self._open.setdefault(index, _Open())
            entry.events_in += count
            if entry.offset_start < 0:
                entry.offset_start = offset_start
            entry.offset_end = offset_end
        for index, count in _counts(hot_seg):
            self._open.setdefault(index, _Open()).after_hot_pixel += count
        if len(after_background):
            bounds = np.flatnonzero(np.diff(kept_seg)) + 1
            starts = np.concatenate(([0], bounds))
            for start, part in zip(starts, np.split(after_background, bounds), strict=True):
                index = int(kept_seg[start])
                self._open.setdefault(index, _Open()).kept.append(part)
        newest = int(raw["t"].max()) // seg_us
        return self._close_below(newest)

    def finish(self) -> list[Segment]:
        """Close every open segment: the input has ended."""
        return self._close_below(None)

    def _segment_of(self, t: np.ndarray, *, count_late: bool = False) -> np.ndarray:
        segments: np.ndarray = t // self.spec.segment_us
        oldest = self._oldest_open
        if oldest is not None and len(segments) and int(segments.min()) < oldest:
            if count_late:
                self.late_events += int((segments < oldest).sum())
            segments = np.maximum(segments, oldest)
        return segments

    def _close_below(self, limit: int | None) -> list[Segment]:
        ready = sorted(i for i in self._open if limit is None or i < limit)
        closed = [self._build(index, self._open.pop(index)) for index in ready]
        if limit is None and ready:
            limit = ready[-1] + 1
        if limit is not None:
            self._oldest_open = (
                limit if self._oldest_open is None else max(self._oldest_open, limit)
            )
        return closed

    def _build(self, index: int, entry: _Open) -> Segment:
        spec = self.spec
        start = index * spec.segment_us
        kept = np.concatenate(entry.kept) if entry.kept else empty_events()
        return Segment(
            index=index,
            start_us=start,
            end_us=start + spec.segment_us,
            events_in=entry.events_in,
            after_hot_pixel=entry.after_hot_pixel,
            after_background=len(kept),
            offset_start=max(entry.offset_start, 0),
            offset_end=max(entry.offset_end, 0),
            windows=tuple(split_windows(kept, start, spec)),
        )


def split_windows(events: Events, segment_start_us: int, spec: WindowSpec) -> Iterator[Window]:
    """Every window of the segment starting at ``segment_start_us``, empty ones included,
    so that trackers see the gaps."""
    first = segment_start_us // spec.window_us
    if len(events):
        order = np.argsort(events["t"], kind="stable")
        events = events[order]
    edges = [segment_start_us + k * spec.window_us for k in range(spec.windows_per_segment + 1)]
    parts = np.split(events, np.searchsorted(events["t"], edges[1:-1], side="left"))
    for k, part in enumerate(parts):
        yield Window(first + k, edges[k], edges[k + 1], part)


def _counts(segments: np.ndarray) -> list[tuple[int, int]]:
    if len(segments) == 0:
        return []
    values, counts = np.unique(segments, return_counts=True)
    return [(int(v), int(c)) for v, c in zip(values, counts, strict=True)]
