"""What every decoder hands out: a ``Recording`` (its ``RecordingInfo`` and a stream of chunks),
and the extras some formats carry beyond the shared µs layout.

``EVENT_DTYPE`` keeps time in whole microseconds. Most sources are µs-exact, but a libcaer
rosbag stamps events in nanoseconds (``time_base`` has sub-µs digits), and the upstream golden
checks sum nanoseconds. So decoders that would lose precision yield ``DecodedChunk`` with the
exact ``t_ns`` beside the events; ``nanoseconds(chunk)`` gives every chunk's time in ns, exact
wherever the source was. External-trigger events (EVT 2/3) ride along in ``triggers``: they are
rare, and keeping them out of the CD stream keeps every event one pixel change.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from evs_bridge.events import EventChunk, RecordingInfo

TRIGGER_DTYPE = np.dtype([("t", "<i8"), ("id", "u1"), ("edge", "u1")])
"""An external trigger: ``t`` in µs (the recording's clock), input ``id`` and ``edge`` (1 rising)."""

Triggers = npt.NDArray[Any]
"""A 1-D array of ``TRIGGER_DTYPE``."""

Nanoseconds = npt.NDArray[np.uint64]


@dataclass(frozen=True, slots=True)
class DecodedChunk(EventChunk):
    """An ``EventChunk`` with what the µs layout cannot hold.

    ``t_ns`` is the exact time of each event in ns when the source has sub-µs digits (libcaer),
    else ``None`` (then ``t * 1000`` is exact). ``triggers`` are the external-trigger events
    decoded from the same span of the source, else ``None``.
    """

    t_ns: Nanoseconds | None = None
    triggers: Triggers | None = None


class Recording(Protocol):
    """A decoded source: metadata up front, then events chunk by chunk in bounded memory."""

    @property
    def info(self) -> RecordingInfo: ...

    def chunks(self) -> Iterator[EventChunk]:
        """Consecutive chunks in source order; each call starts again from the beginning."""
        ...


def nanoseconds(chunk: EventChunk) -> Nanoseconds:
    """The chunk's event times in ns: exact ``t_ns`` when the decoder kept it, else ``t * 1000``."""
    if isinstance(chunk, DecodedChunk) and chunk.t_ns is not None:
        return chunk.t_ns
    return chunk.events["t"].astype(np.uint64) * np.uint64(1000)


def empty_triggers() -> Triggers:
    return np.empty(0, dtype=TRIGGER_DTYPE)
