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


_MAGIC = b"#!AER-DAT4.0\r\n"


def _check_header(path: Path) -> None:
    """Refuse a file cut off in its header (the magic, the header's length, the header), on
    which the Rust decoder panics, printing its own message first."""
    try:
        with path.open("rb") as file:
            start = file.read(len(_MAGIC) + 4)
            if start[: len(_MAGIC)] != _MAGIC:
                return  # not AEDAT 4: the decoder says so
            length = int.from_bytes(start[len(_MAGIC) :], "little")
            cut = len(start) < len(_MAGIC) + 4 or length < 4 or len(file.read(length)) < length
    except OSError as exc:
        raise UnsupportedAedat(f"{path}: not a readable AEDAT 4 file: {exc}") from exc
    if cut:
        raise UnsupportedAedat(f"{path}: not a readable AEDAT 4 file: cut off in its header")


def _decoder_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is the Rust decoder's: its errors, or a panic in it (a file cut off
    in its header), which pyo3 raises as ``PanicException``, a ``BaseException``."""
    return isinstance(exc, RuntimeError | OSError | ValueError) or (
        type(exc).__name__ == "PanicException"
    )


class AedatRecording:
    def __init__(self, path: Path, *, chunk_events: int = 65536) -> None:
        self.path = path
        self.chunk_events = chunk_events
        _check_header(path)
        try:
            streams: dict[int, dict[str, Any]] = aedat.Decoder(str(path)).id_to_stream()
        except BaseException as exc:
            if not _decoder_failed(exc):
                raise
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
        except BaseException as exc:
            if not _decoder_failed(exc):
                raise
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
