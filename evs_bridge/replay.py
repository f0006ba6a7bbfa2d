"""Replaying a recorded file through the pipeline, and the settings a bridge is built from.

``BridgeSettings`` gathers every knob of one bridge (filters, windows, regions, tracking,
classifier, channels, run tag) so the CLI, the MQTT bridge and tests build pipelines the
same way (``build_pipeline``). ``send_recording`` decodes a file chunk by chunk (the
decoders' ``open_recording``), feeds the pipeline, and hands every lineage event to the
given sink (an ``Output``): file input is read only as fast as the output takes it, so a
full spool holds the reader back.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from evs_bridge.channels import ChannelMap
from evs_bridge.classify import Classifier, HeuristicClassifier
from evs_bridge.decoders import Recording, open_recording
from evs_bridge.events import ClockDomain
from evs_bridge.filters import BackgroundActivityFilter, HotPixelFilter
from evs_bridge.lineage import LineageEvents, SourceRef
from evs_bridge.pipeline import EventSink, Pipeline, PipelineConfig, PipelineStats

log = logging.getLogger(__name__)

DEFAULT_CHUNK_EVENTS = 65536
_OFFSET_UNITS = {"evt3": "byte", "evt2": "byte", "aedat4": "packet", "npz": "event", "npy": "event"}


@dataclass(frozen=True, slots=True)
class BridgeSettings:
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    background_dt_us: int = 2000
    background_neighbourhood: int = 8
    background_backend: str = "numpy"
    """``numpy`` (no extra dependency) or ``numba`` (compiled; needs the numba package)."""
    hot_pixel_window_us: int = 1_000_000
    hot_pixel_factor: float = 100.0
    hot_pixel_min_rate_hz: float = 100.0
    classifier: Classifier = field(default_factory=HeuristicClassifier)
    channels: ChannelMap = field(default_factory=ChannelMap)
    run: str | None = None


def build_pipeline(
    sensor: str,
    source: SourceRef,
    clock: ClockDomain,
    *,
    width: int,
    height: int,
    sink: EventSink,
    settings: BridgeSettings | None = None,
) -> Pipeline:
    settings = settings or BridgeSettings()
    lineage = LineageEvents(sensor, source, clock, width=width, height=height, run=settings.run)
    return Pipeline(
        lineage,
        width=width,
        height=height,
        hot_pixel=HotPixelFilter(
            width,
            height,
            window_us=settings.hot_pixel_window_us,
            factor=settings.hot_pixel_factor,
            min_rate_hz=settings.hot_pixel_min_rate_hz,
        ),
        background=BackgroundActivityFilter(
            width,
            height,
            dt_us=settings.background_dt_us,
            neighbourhood=settings.background_neighbourhood,
            backend=settings.background_backend,
        ),
        sink=sink,
        classifier=settings.classifier,
        channels=settings.channels,
        config=settings.pipeline,
    )


def read_file_source(path: Path, format_name: str) -> SourceRef:
    """The ``dataref`` base of a file: its SHA-256 (read once, in 1 MiB blocks), never its
    name, so that a renamed or moved file gives the same events."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    sha256 = digest.hexdigest()
    unit = (
        "message" if format_name.startswith("rosbag2") else _OFFSET_UNITS.get(format_name, "byte")
    )
    log.info("%s is recording %s (sha256 %s)", path, sha256[:12], sha256)
    return SourceRef(
        uri=None,
        format=format_name,
        offset_unit=unit,
        recording=sha256[:12],
        sha256=sha256,
    )


def send_recording(
    path: Path,
    sensor: str,
    sink: EventSink,
    *,
    settings: BridgeSettings | None = None,
    chunk_events: int = DEFAULT_CHUNK_EVENTS,
    on_chunk: Callable[[PipelineStats, int], None] | None = None,
    recording: Recording | None = None,
) -> PipelineStats:
    """Run the file at ``path`` (or ``recording``, already opened from it) through a new
    pipeline into ``sink``; ``on_chunk`` gets the running stats and the chunk's end offset
    after each chunk. The caller flushes the sink."""
    if recording is None:
        recording = open_recording(path, chunk_events=chunk_events)
    info = recording.info
    pipeline = build_pipeline(
        sensor,
        read_file_source(path, info.format),
        info.clock,
        width=info.width,
        height=info.height,
        sink=sink,
        settings=settings,
    )
    for chunk in recording.chunks():
        pipeline.feed(chunk)
        if on_chunk is not None:
            on_chunk(pipeline.stats, chunk.offset_end)
    pipeline.finish()
    return pipeline.stats
