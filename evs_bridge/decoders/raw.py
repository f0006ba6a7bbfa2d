"""Prophesee ``.raw`` files: the ``%`` text header, then an EVT 3.0 or EVT 2.0 word stream.

The header is a run of lines starting with ``%`` (``% evt 3.0`` or ``% format EVT3;width=..;
height=..``, ``% geometry 1280x720``, ``% plugin_name ...``), usually closed by ``% end``. The
format and geometry come from it; every header key is kept in the metadata. The body is read in
pieces of about two bytes per wanted event (an EVT 3.0 event costs at most one 16-bit word, a
vector word carries up to 12), fed to the stateful decoder, and each chunk's offsets are the
absolute byte span of the file it was decoded from. Clock: sensor µs. A body that does not
end on a word boundary (2 bytes for EVT 3.0, 4 for EVT 2.0) is a cut file, refused when it
opens (``UnsupportedRaw``), before any of it is decoded.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from evs_bridge.decoders.evt2 import Evt2Decoder
from evs_bridge.decoders.evt3 import Evt3Decoder
from evs_bridge.decoders.recording import DecodedChunk
from evs_bridge.events import ClockDomain, EventChunk, RecordingInfo


class UnsupportedRaw(ValueError):
    """The ``.raw`` header names no format we decode, or no sensor geometry."""


_FORMATS = {"3.0": "evt3", "2.0": "evt2", "EVT3": "evt3", "EVT2": "evt2"}
_WORD_BYTES = {"evt3": 2, "evt2": 4}


_MAX_HEADER_LINE = 64 << 10  # real header lines are tens of bytes


def read_header(stream: BinaryIO) -> tuple[dict[str, str], int]:
    """The ``%`` header lines as ``{key: value}``, and the byte offset where the data starts.
    A header line longer than 64 KiB is refused (``UnsupportedRaw``): a file that starts
    with ``%`` and has no newline would otherwise be read whole into one line."""
    header: dict[str, str] = {}
    while True:
        start = stream.tell()
        line = stream.readline(_MAX_HEADER_LINE + 1)
        if len(line) > _MAX_HEADER_LINE and line.startswith(b"%"):
            raise UnsupportedRaw(f"a header line at byte {start} is over 64 KiB")
        if not line.startswith(b"%"):
            stream.seek(start)
            break
        text = line[1:].decode("ascii", errors="replace").strip()
        if text == "end":
            break
        key, _, value = text.partition(" ")
        if key:
            header[key] = value.strip()
    return header, stream.tell()


def describe(header: dict[str, str], path: Path) -> RecordingInfo:
    fmt = _FORMATS.get(header.get("evt", ""))
    width = height = None
    if "format" in header:
        name, *params = header["format"].split(";")
        fmt = fmt or _FORMATS.get(name.strip())
        values = dict(p.split("=", 1) for p in params if "=" in p)
        if "width" in values and "height" in values:
            width, height = int(values["width"]), int(values["height"])
    if fmt is None:
        raise UnsupportedRaw(f"{path}: the header names no EVT 2.0/3.0 format: {header}")
    geometry = re.fullmatch(r"(\d+)x(\d+)", header.get("geometry", ""))
    if geometry:
        width, height = int(geometry[1]), int(geometry[2])
    if width is None or height is None:
        raise UnsupportedRaw(f"{path}: the header gives no sensor geometry")
    name = header.get("sensor_name") or header.get("plugin_name") or fmt
    return RecordingInfo(
        sensor=f"prophesee-{name}",
        width=width,
        height=height,
        clock=ClockDomain.SENSOR,
        format=fmt,
        metadata={"header": header},
    )


def _refuse_cut_word(path: Path, data_offset: int, word_bytes: int) -> None:
    """``UnsupportedRaw`` when the data does not end on a word boundary: the file was cut
    (a copy or a recording interrupted), and is refused before anything of it is sent."""
    stray = (path.stat().st_size - data_offset) % word_bytes
    if stray:
        raise UnsupportedRaw(
            f"{path}: truncated: the data ends mid-word ({stray} stray byte"
            f"{'s' if stray > 1 else ''} after the last whole {8 * word_bytes}-bit word)"
        )


class RawRecording:
    """A Prophesee ``.raw`` file (EVT 3.0 or EVT 2.0)."""

    def __init__(self, path: Path, *, chunk_events: int = 65536) -> None:
        self.path = path
        self.chunk_events = chunk_events
        with path.open("rb") as stream:
            header, self.data_offset = read_header(stream)
        self._info = describe(header, path)
        _refuse_cut_word(path, self.data_offset, _WORD_BYTES[self._info.format])

    @property
    def info(self) -> RecordingInfo:
        return self._info

    def chunks(self) -> Iterator[EventChunk]:
        decoder = Evt3Decoder() if self._info.format == "evt3" else Evt2Decoder()
        piece_bytes = max(4, (self.chunk_events * 2) & ~3)
        position = self.data_offset
        with self.path.open("rb") as stream:
            stream.seek(position)
            while piece := stream.read(piece_bytes):
                events = decoder.decode(piece)
                triggers = decoder.take_triggers()
                yield DecodedChunk(
                    events=events,
                    offset_start=position,
                    offset_end=position + len(piece),
                    triggers=triggers if len(triggers) else None,
                )
                position += len(piece)
