"""The bridge's pipeline: chunks of sensor events in, lineage events out, in cause order.

    decode ─▶ hot-pixel filter ─▶ background-activity filter ─▶ windows/segments
           ─▶ regions per window ─▶ tracks ─▶ classifier ─▶ channel ─▶ lineage events

The pipeline does no I/O. Decoding happens before it (a ``Recording``'s chunks, or MQTT
packets), sending after it: every lineage event goes to an ``EventSink`` (the ``Output``)
with its delivery, in the order it was made. That order is a cause order: a segment
comes before the activities found in it, and activities before the sustained signal they
cause, so a sink that keeps the order never sends an effect before its cause.

The sustained signal: ``sustained_windows`` (N, 10 by default = 200 ms) consecutive
windows with at least one region each emit one ``evs.activity.sustained``, caused by the
largest region's activity of each of those windows (up to ten). A window without regions
ends the run; the next run can emit again. It carries the highest priority seen in the
run and goes out at least "soon", since its purpose is to warm things up early.

What enters (``_admit``), in one place for every source, before the filters: events outside
the ``width`` x ``height`` geometry are dropped and counted (``stats.out_of_geometry``);
with the unix clock, times outside 1970-9999 too, and in the last window of 9999, whose
activities would be timed at its end, past 9999 (``stats.outliers``). A time jump of more
than ``jump_segments`` segments ahead of the newest admitted event is an outlier (a wild
timestamp, e.g. a flipped bit), dropped and counted, unless ``jump_confirm_events``
consecutive events agree on the new time (each within the same margin of the first): then
the stream really moved on (a sensor silent for a while), the confirming event is admitted
and so is everything after it; the events that confirmed it before are lost. The first
newest time is the median of the stream's first ``jump_confirm_events`` times in the
geometry (its first chunks are held until they come), so a wild first time is an outlier
too, and not the time every later event is late for. Every
decision depends only on the events before it in stream order, so the result does not
depend on the chunking.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from opentelemetry import trace

from evs_bridge.channels import ChannelMap, Delivery
from evs_bridge.classify import Classifier, HeuristicClassifier
from evs_bridge.events import ClockDomain, EventChunk, Events
from evs_bridge.lineage import MAX_SUSTAINED_CAUSES, MAX_UNIX_US, MIN_UNIX_US, LineageEvents
from evs_bridge.regions import Region, RegionParams, Tracker, TrackParams, find_regions
from evs_bridge.windows import Segment, SegmentCutter, WindowSpec

_tracer = trace.get_tracer("evs_bridge")

_URGENCY = {Delivery.LAZY: 0, Delivery.SOON: 1, Delivery.IMMEDIATE: 2}


class EventFilter(Protocol):
    def apply(self, events: Events) -> Events: ...


class EventSink(Protocol):
    def put(self, event: dict[str, Any], delivery: Delivery) -> None: ...


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    windows: WindowSpec = field(default_factory=WindowSpec)
    regions: RegionParams = field(default_factory=RegionParams)
    tracking: TrackParams = field(default_factory=TrackParams)
    sustained_windows: int = 10
    segment_delivery: Delivery = Delivery.LAZY
    jump_segments: int = 5
    """A time more than this many segments ahead of the newest admitted one is an outlier."""
    jump_confirm_events: int = 8
    """...unless this many consecutive events agree on it."""

    def __post_init__(self) -> None:
        if self.sustained_windows <= 0 or self.jump_segments <= 0 or self.jump_confirm_events <= 0:
            raise ValueError(
                "sustained_windows, jump_segments, jump_confirm_events must be positive"
            )


class ClassifierError(ValueError):
    """A classifier returned something other than (label, confidence in [0, 1])."""


@dataclass(slots=True)
class PipelineStats:
    events_in: int = 0
    after_hot_pixel: int = 0
    after_background: int = 0
    segments: int = 0
    activities: int = 0
    sustained: int = 0
    labels: dict[str, int] = field(default_factory=dict)
    out_of_geometry: int = 0
    outliers: int = 0
    newest_us: int | None = None
    """The newest admitted event time."""

    @property
    def filter_ratio(self) -> float:
        return self.after_background / self.events_in if self.events_in else 0.0


@dataclass(slots=True)
class _Run:
    last_window: int | None = None  # window indices are negative before the sensor's zero
    windows: int = 0
    start_us: int = 0
    causes: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_SUSTAINED_CAUSES))
    priority: int = 0
    delivery: Delivery = Delivery.SOON


class Pipeline:
    """One sensor's pipeline; ``feed`` chunks in time order, then ``finish``."""

    def __init__(
        self,
        lineage: LineageEvents,
        *,
        width: int,
        height: int,
        hot_pixel: EventFilter,
        background: EventFilter,
        sink: EventSink,
        classifier: Classifier | None = None,
        channels: ChannelMap | None = None,
        config: PipelineConfig | None = None,
    ) -> None:
        self.lineage = lineage
        self.config = config or PipelineConfig()
        self.stats = PipelineStats()
        self._width, self._height = width, height
        self._hot_pixel, self._background = hot_pixel, background
        self._sink = sink
        self._classifier = classifier or HeuristicClassifier()
        self._channels = channels or ChannelMap()
        self._cutter = SegmentCutter(self.config.windows)
        self._tracker = Tracker(self.config.windows.window_us, self.config.tracking)
        self._run = _Run()
        self._jump_us = self.config.jump_segments * self.config.windows.segment_us
        # An activity's time is the end of its window, so an event is admitted only if its
        # window ends within RFC 3339's range (the last window of year 9999 ends past it).
        window_us = self.config.windows.window_us
        self._last_unix_us = (MAX_UNIX_US // window_us) * window_us - 1
        self._candidate: int | None = None  # a far-ahead time waiting for confirmation
        self._candidates = 0
        self._start: list[EventChunk] | None = []  # the stream's first chunks, held
        self._start_times: list[int] = []  # their first fitting times

    def feed(self, chunk: EventChunk) -> None:
        if self._start is not None:
            # The first reference time is the median of the stream's first
            # ``jump_confirm_events`` times, not its first time alone: were that one
            # wild, every later event would be behind it, in its segment. So the chunks
            # are held until that many have come (in stream order, whatever the chunking),
            # without what would not be admitted anyway (so a stream that starts with
            # millions of events outside the sensor holds none of them).
            chunk = self._fitting(chunk)
            self._start.append(chunk)
            times = chunk.events["t"][: self._wanted_times()]
            self._start_times.extend(int(t) for t in times)
            if self._wanted_times():
                return
            chunk = self._started()
        self._process(chunk)

    def _wanted_times(self) -> int:
        return max(self.config.jump_confirm_events - len(self._start_times), 0)

    def _started(self) -> EventChunk:
        """The held chunks as one, the reference time set from them (the median of their
        first ``jump_confirm_events`` fitting times, or of those there are)."""
        held = _joined(self._start or [])
        self._start = None
        if self._start_times:
            self.stats.newest_us = int(np.median(self._start_times))
        return held

    def _process(self, chunk: EventChunk) -> None:
        raw = self._admit(chunk.events)
        after_hot_pixel = self._hot_pixel.apply(raw)
        after_background = self._background.apply(after_hot_pixel)
        self.stats.events_in += len(raw)
        self.stats.after_hot_pixel += len(after_hot_pixel)
        self.stats.after_background += len(after_background)
        closed = self._cutter.feed(
            raw,
            after_hot_pixel,
            after_background,
            offset_start=chunk.offset_start,
            offset_end=chunk.offset_end,
        )
        self._emit_all(closed)

    @property
    def jump_us(self) -> int:
        """How far ahead of the newest event a time is an outlier (``jump_segments``)."""
        return self._jump_us

    def _admit(self, events: Events) -> Events:
        if len(events) == 0:
            return events
        keep = self._fits(events)
        keep &= self._not_jumps(events["t"].astype(np.int64, copy=False), keep)
        return events if bool(keep.all()) else events[keep]

    def _fits(self, events: Events) -> np.ndarray:
        """Which of ``events`` are in the geometry (and, with the unix clock, in range);
        the others are counted (``out_of_geometry``, ``outliers``)."""
        keep = (events["x"] < self._width) & (events["y"] < self._height)
        self.stats.out_of_geometry += len(events) - int(np.count_nonzero(keep))
        if self.lineage.clock is ClockDomain.UNIX:
            times = events["t"].astype(np.int64, copy=False)
            in_range = (times >= MIN_UNIX_US) & (times <= self._last_unix_us)
            self.stats.outliers += int(np.count_nonzero(keep & ~in_range))
            keep &= in_range
        return keep

    def _fitting(self, chunk: EventChunk) -> EventChunk:
        """``chunk`` without what ``_admit`` drops before the jump rule, counted (``_fits``):
        a held chunk keeps only what may be admitted."""
        if len(chunk.events) == 0:
            return chunk
        keep = self._fits(chunk.events)
        if bool(keep.all()):
            return chunk
        return EventChunk(chunk.events[keep], chunk.offset_start, chunk.offset_end)

    def _not_jumps(self, times: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """Which of the events in ``candidates`` are no outlier jump (see the docstring)."""
        keep = candidates.copy()
        index = np.flatnonzero(candidates)
        position = 0
        while position < len(index):
            block = index[position : position + 4096]
            t = times[block]
            newest = self.stats.newest_us
            if newest is None:
                newest = int(t[0])
            before = np.maximum.accumulate(np.concatenate(([newest], t[:-1])))
            jumps = np.flatnonzero(t - before > self._jump_us)
            if len(jumps) == 0:
                self.stats.newest_us = max(newest, int(t.max()))
                self._candidate = None
                position += len(block)
                continue
            first = int(jumps[0])
            if first:
                self.stats.newest_us = max(newest, int(t[:first].max()))
                self._candidate = None
            jump = int(t[first])
            if self._candidate is None or abs(jump - self._candidate) > self._jump_us:
                self._candidate, self._candidates = jump, 0
            self._candidates += 1
            if self._candidates >= self.config.jump_confirm_events:
                self.stats.newest_us = jump
                self._candidate = None
            else:
                keep[block[first]] = False
                self.stats.outliers += 1
            position += first + 1
        return keep

    def finish(self) -> None:
        if self._start:  # fewer events than it takes to know where the stream starts
            self._process(self._started())
        self._start = None
        self._emit_all(self._cutter.finish())

    def _emit_all(self, segments: list[Segment]) -> None:
        """Emit each of ``segments``, the cutter's no longer: when one fails (a classifier
        raises), the others are still emitted, and the first error is raised after."""
        failed: Exception | None = None
        for segment in segments:
            try:
                self._emit(segment)
            except Exception as exc:  # a classifier is any code: raised below
                failed = failed or exc
        if failed is not None:
            raise failed

    def _emit(self, segment: Segment) -> None:
        # A span per segment, through OpenTelemetry's API alone: a no-op (a few µs a
        # segment) unless the process installed an SDK (docs/observability.md, Traces).
        with _tracer.start_as_current_span("evs segment") as span:
            segment_id = self._emit_segment(segment)
            if span.is_recording():
                span.set_attribute("causeway.evs.segment", segment_id)
                span.set_attribute("causeway.evs.events_in", segment.events_in)
                span.set_attribute("causeway.evs.windows", len(segment.windows))
                span.set_attribute("causeway.evs.filter_ratio", segment.filter_ratio)

    def _emit_segment(self, segment: Segment) -> str:
        """Emit ``segment``'s event and its windows' events; the segment event's id."""
        found: list[list[Region]] = []
        for window in segment.windows:
            regions = find_regions(
                window.events,
                self._width,
                self._height,
                window_index=window.index,
                window_start_us=window.start_us,
                window_end_us=window.end_us,
                params=self.config.regions,
            )
            found.append(self._tracker.update(regions))
        segment_event = self.lineage.segment(
            segment,
            regions=sum(len(r) for r in found),
            active_windows=sum(1 for r in found if r),
        )
        self._sink.put(segment_event, self.config.segment_delivery)
        self.stats.segments += 1
        for regions in found:
            self._emit_window(regions, segment_event["id"])
        return str(segment_event["id"])

    def _emit_window(self, regions: list[Region], segment_id: str) -> None:
        if not regions:
            return
        window = regions[0]
        run = self._run
        if run.last_window is None or window.window_index != run.last_window + 1:
            self._run = run = _Run(start_us=window.window_start_us)
        largest: tuple[int, str] = (-1, "")
        for region in regions:
            label, confidence = self._classify(region)
            channel = self._channels.channel(label)
            event = self.lineage.activity(region, label, confidence, channel, segment_id)
            self._sink.put(event, channel.delivery)
            self.stats.activities += 1
            self.stats.labels[label] = self.stats.labels.get(label, 0) + 1
            if region.event_count > largest[0]:
                largest = (region.event_count, event["id"])
            run.priority = max(run.priority, channel.priority)
            if _URGENCY[channel.delivery] > _URGENCY[run.delivery]:
                run.delivery = channel.delivery
        run.last_window = window.window_index
        run.windows += 1
        run.causes.append(largest[1])
        if run.windows == self.config.sustained_windows:
            event = self.lineage.sustained(
                window.window_start_us,
                window.window_end_us,
                windows=run.windows,
                run_start_us=run.start_us,
                activity_ids=list(run.causes),
                priority=run.priority,
            )
            self._sink.put(event, run.delivery)
            self.stats.sustained += 1

    def _classify(self, region: Region) -> tuple[str, float]:
        """The classifier's answer as plain JSON values: a ``str`` label and a confidence
        rounded to 3 digits in [0, 1] (numpy scalars are accepted), else ``ClassifierError``."""
        answer = self._classifier.classify(region)
        try:
            label, raw = answer
            confidence = round(float(raw), 3)
        except (TypeError, ValueError) as exc:
            raise ClassifierError(
                f"classifier {type(self._classifier).__name__} returned {answer!r}, "
                "not (label, confidence)"
            ) from exc
        if not math.isfinite(confidence) or not 0.0 <= confidence <= 1.0:
            raise ClassifierError(
                f"classifier {type(self._classifier).__name__} returned confidence "
                f"{raw!r}, not a number in [0, 1]"
            )
        return str(label), confidence


def _joined(chunks: list[EventChunk]) -> EventChunk:
    """Consecutive ``chunks`` as one."""
    if len(chunks) == 1:
        return chunks[0]
    return EventChunk(
        np.concatenate([c.events for c in chunks]), chunks[0].offset_start, chunks[-1].offset_end
    )
