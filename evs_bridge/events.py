"""The one array layout every decoder produces, and what a recording says about itself.

Events are a numpy structured array of ``EVENT_DTYPE``: ``x``, ``y`` (pixels), ``p`` (polarity,
0 or 1) and ``t`` (microseconds, in the sensor's clock domain), time-ordered. A decoder yields
them in chunks (``EventChunk``) so a recording of any length decodes in bounded memory; each
chunk says where in the source it came from, so an output event can point back at its bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

MAX_SIDE_PX = 8192
"""The widest and tallest sensor the bridge takes (today's are 1280x720 at most)."""

EVENT_DTYPE = np.dtype([("x", "<u2"), ("y", "<u2"), ("p", "u1"), ("t", "<i8")])

Events = npt.NDArray[Any]
"""A 1-D array of ``EVENT_DTYPE``."""


class ClockDomain(StrEnum):
    """What the microseconds in ``t`` count from."""

    SENSOR = "sensor"
    """Time since the sensor started (Prophesee EVT 2/3): comparable only within a recording."""
    UNIX = "unix"
    """Microseconds since the Unix epoch (libcaer, AEDAT 4)."""


@dataclass(frozen=True, slots=True)
class RecordingInfo:
    """What a source says about itself before any event is read. The geometry is refused
    (``ValueError``) outside 0-``MAX_SIDE_PX`` a side: the filters allocate a cell per
    pixel, so a file that declares (or an array whose coordinates reach) 65,536 pixels a
    side would have them allocate tens of GiB."""

    sensor: str
    """The sensor model or family as the source names it, e.g. ``prophesee-evt3``."""
    width: int
    height: int
    clock: ClockDomain
    format: str
    """``evt3``, ``evt2``, ``aedat4``, ``rosbag2-evt3``, ``rosbag2-libcaer``, ``npz``, ``npy``."""
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # 0x0: an array of no events, which names no geometry.
        if not (0 <= self.width <= MAX_SIDE_PX and 0 <= self.height <= MAX_SIDE_PX):
            raise ValueError(
                f"geometry {self.width}x{self.height} is outside 0-{MAX_SIDE_PX} pixels a side"
            )


@dataclass(frozen=True, slots=True)
class EventChunk:
    """A run of consecutive events and the span of the source they came from.

    ``offset_start``/``offset_end`` are positions in the source (bytes of a file, message
    indexes of a bag, array indexes): half-open, so consecutive chunks tile the source.
    """

    events: Events
    offset_start: int
    offset_end: int


def empty_events() -> Events:
    return np.empty(0, dtype=EVENT_DTYPE)
