"""AEDAT 4 files (iniVation DV: DAVIS, DVXplorer), decoded by the ``aedat`` package.

``aedat`` (MIT, a small Rust wheel) walks the file packet by packet and hands each event packet
over as a numpy array (``t <u8`` Unix µs, ``x``, ``y``, ``on``), so memory stays bounded by the
packet size. Only the first event stream is decoded; frames, IMU and trigger streams are
skipped. Chunks group whole event packets; offsets are indexes of those packets in the file
(counting event packets of the chosen stream only). Clock: Unix-epoch µs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aedat
import numpy as np

from evs_bridge.events import EVENT_DTYPE, ClockDomain, EventChunk, Events, RecordingInfo


class UnsupportedAedat(ValueError):
    """The file has no event stream, or the ``aedat`` package cannot read it."""


class AedatRecording:
    def __init__(self, path: Path, *, chunk_events: int = 65536) -> None:
        self.path = path
        self.chunk_events = chunk_events
        try:
            streams: dict[int, dict[str, Any]] = aedat.Decoder(str(path)).id_to_stream()
        except (RuntimeError, OSError, ValueError) as exc:  # the Rust decoder's errors
            raise UnsupportedAedat(f"{path}: not a readable AEDAT 4 file: {exc}") from exc
        found = [(i, s) for i, s in sorted(streams.items()) if s.get("type") == "events"]
        if not found:
            raise UnsupportedAedat(f"{path}: no event stream")
        self._stream_id, stream = found[0]
        self._info = RecordingInfo(
            sensor="inivation-aedat4",
            width=int(stream["width"]),
            height=int(stream["height"]),
            clock=ClockDomain.UNIX,
            format="aedat4",
            metadata={"streams": {int(i): dict(s) for i, s in streams.items()}},
        )

    @property
    def info(self) -> RecordingInfo:
        return self._info

    def chunks(self) -> Iterator[EventChunk]:
        try:
            yield from self._chunks()
        except (RuntimeError, OSError) as exc:
            raise UnsupportedAedat(f"{self.path}: not a readable AEDAT 4 file: {exc}") from exc

    def _chunks(self) -> Iterator[EventChunk]:
        pending: list[Events] = []
        held = start = index = 0
        for packet in aedat.Decoder(str(self.path)):
            if packet.get("stream_id") != self._stream_id or "events" not in packet:
                continue
            pending.append(_normalise(packet["events"]))
            held += len(pending[-1])
            index += 1
            if held >= self.chunk_events:
                yield EventChunk(np.concatenate(pending), start, index)
                pending, held, start = [], 0, index
        if pending:
            yield EventChunk(np.concatenate(pending), start, index)


def _normalise(packet: Any) -> Events:
    events = np.empty(len(packet), dtype=EVENT_DTYPE)
    events["x"] = packet["x"]
    events["y"] = packet["y"]
    events["p"] = packet["on"]
    events["t"] = packet["t"].astype(np.int64)
    return events
