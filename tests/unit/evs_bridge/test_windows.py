"""Windows and segments: aligned to sensor time, independent of chunking, counting each stage."""

from __future__ import annotations

import numpy as np
import pytest

from evs_bridge.events import EVENT_DTYPE, Events
from evs_bridge.windows import Segment, SegmentCutter, WindowSpec


def events_at(times: list[int]) -> Events:
    events = np.zeros(len(times), dtype=EVENT_DTYPE)
    events["t"] = times
    events["x"] = np.arange(len(times)) % 100
    return events


def cut(events: Events, chunk: int, spec: WindowSpec | None = None) -> list[Segment]:
    cutter = SegmentCutter(spec)
    segments: list[Segment] = []
    for start in range(0, len(events), chunk):
        part = events[start : start + chunk]
        kept = part[part["x"] % 2 == 0]
        segments += cutter.feed(part, part, kept, offset_start=start, offset_end=start + len(part))
    return segments + cutter.finish()


class TestSegmentCutter:
    def test_windows_start_at_multiples_of_the_window_in_sensor_time(self) -> None:
        segments = cut(events_at([1_234_567, 1_250_000, 1_301_000]), 10)
        assert [(s.start_us, s.end_us) for s in segments] == [
            (1_200_000, 1_300_000),
            (1_300_000, 1_400_000),
        ]
        first = segments[0]
        assert [(w.start_us, w.end_us) for w in first.windows][:2] == [
            (1_200_000, 1_220_000),
            (1_220_000, 1_240_000),
        ]
        assert len(first.windows) == 5

    def test_the_result_does_not_depend_on_the_chunking(self) -> None:
        rng = np.random.default_rng(3)
        events = events_at(sorted(rng.integers(0, 1_000_000, 5000).tolist()))
        whole = cut(events, len(events))
        for chunk in (1, 7, 333, 4096):
            pieces = cut(events, chunk)
            assert [
                (s.start_us, s.events_in, s.after_background, [len(w.events) for w in s.windows])
                for s in pieces
            ] == [
                (s.start_us, s.events_in, s.after_background, [len(w.events) for w in s.windows])
                for s in whole
            ]

    def test_each_stage_is_counted_and_the_ratio_is_the_kept_fraction(self) -> None:
        [segment] = cut(events_at([10, 20, 30, 40]), 4)
        assert (segment.events_in, segment.after_hot_pixel, segment.after_background) == (4, 4, 2)
        assert segment.filter_ratio == 0.5

    def test_a_segment_closes_only_when_later_input_arrives(self) -> None:
        cutter = SegmentCutter(WindowSpec(window_us=10, windows_per_segment=1))
        first = events_at([1, 5])
        assert cutter.feed(first, first, first, offset_start=0, offset_end=2) == []
        later = events_at([12])
        [closed] = cutter.feed(later, later, later, offset_start=2, offset_end=3)
        assert (closed.start_us, closed.events_in, closed.offset_start, closed.offset_end) == (
            0,
            2,
            0,
            2,
        )

    def test_a_late_event_joins_the_oldest_open_segment(self) -> None:
        cutter = SegmentCutter(WindowSpec(window_us=10, windows_per_segment=1))
        head = events_at([1, 15])
        cutter.feed(head, head, head, offset_start=0, offset_end=2)
        late = events_at([3])
        cutter.feed(late, late, late, offset_start=2, offset_end=3)
        [segment] = cutter.finish()
        assert (segment.start_us, segment.events_in, cutter.late_events) == (10, 2, 1)

    def test_before_the_sensors_zero_a_closed_segment_stays_closed(self) -> None:
        # Segment indices are negative there: a closed one reopened would be emitted again,
        # under the same id with other content.
        cutter = SegmentCutter(WindowSpec(window_us=10, windows_per_segment=1))
        head = events_at([-25, -15])
        [closed] = cutter.feed(head, head, head, offset_start=0, offset_end=2)
        late = events_at([-24])
        cutter.feed(late, late, late, offset_start=2, offset_end=3)
        [last] = cutter.finish()
        assert (closed.start_us, closed.events_in) == (-30, 1)
        assert (last.start_us, last.events_in, cutter.late_events) == (-20, 2, 1)

    def test_empty_windows_are_kept_so_trackers_see_gaps(self) -> None:
        [segment] = cut(events_at([1_000, 1_001, 61_000, 61_001]), 4)
        assert [len(w.events) for w in segment.windows] == [1, 0, 0, 1, 0]

    def test_a_window_must_have_a_length(self) -> None:
        with pytest.raises(ValueError, match="positive"):
            WindowSpec(window_us=0)
