"""Every input format, decoded to ``EVENT_DTYPE`` chunks behind one call: ``open_recording``.

The decoder is chosen by content first and suffix second: a file starting with ``%`` is a
Prophesee ``.raw`` (EVT 3.0 or 2.0, by its header), one starting with the SQLite magic is a
rosbag2 bag, ``#!AER-DAT4`` is AEDAT 4, and ``.npz``/``.npy`` are numpy arrays. Each recording
decodes lazily, chunk by chunk, so a recording of any length fits in bounded memory.
"""

from __future__ import annotations

from pathlib import Path

from evs_bridge.decoders.aedat import AedatRecording
from evs_bridge.decoders.arrays import ArrayRecording
from evs_bridge.decoders.evt2 import Evt2Decoder
from evs_bridge.decoders.evt3 import Evt3Decoder
from evs_bridge.decoders.raw import RawRecording
from evs_bridge.decoders.recording import (
    TRIGGER_DTYPE,
    DecodedChunk,
    Recording,
    Triggers,
    nanoseconds,
)
from evs_bridge.decoders.rosbag import RosbagRecording

__all__ = [
    "TRIGGER_DTYPE",
    "DecodedChunk",
    "Evt2Decoder",
    "Evt3Decoder",
    "Recording",
    "Triggers",
    "UnknownFormat",
    "nanoseconds",
    "open_recording",
]

_SQLITE_MAGIC = b"SQLite format 3\x00"
_AEDAT4_MAGIC = b"#!AER-DAT4"
_NUMPY_MAGIC = b"\x93NUMPY"


class UnknownFormat(ValueError):
    """The file is none of the formats we decode."""


def open_recording(path: Path, *, chunk_events: int = 65536) -> Recording:
    """Open ``path`` for chunked decoding; chunks hold about ``chunk_events`` events each."""
    path = Path(path)
    with path.open("rb") as stream:
        head = stream.read(16)
    suffix = path.suffix.lower()
    if head.startswith(b"%") or (suffix == ".raw" and not head.startswith(_SQLITE_MAGIC)):
        return RawRecording(path, chunk_events=chunk_events)
    if head.startswith(_SQLITE_MAGIC) or suffix == ".db3":
        return RosbagRecording(path, chunk_events=chunk_events)
    if head.startswith(_AEDAT4_MAGIC) or suffix == ".aedat4":
        return AedatRecording(path, chunk_events=chunk_events)
    if head.startswith(_NUMPY_MAGIC) or head.startswith(b"PK") or suffix in (".npz", ".npy"):
        return ArrayRecording(path, chunk_events=chunk_events)
    raise UnknownFormat(f"{path}: not a .raw, .db3, .aedat4, .npz or .npy recording")
