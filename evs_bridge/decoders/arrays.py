"""Events saved as numpy arrays: ``.npz`` (``events`` plus ``width``/``height``) or ``.npy``.

An array with fields ``x``, ``y``, ``p`` (or ``on``/``polarity``) and ``t`` is accepted in any
field order and integer width, and normalised to ``EVENT_DTYPE`` chunk by chunk. Memory stays
bounded either way: a ``.npy`` file is memory-mapped, and the ``events`` member of an ``.npz``
(stored or deflated) is read as a stream, ``chunk_events`` records at a time, after its ``.npy``
header. The geometry comes from ``width``/``height`` members, else from the largest coordinates
(one extra streaming pass). ``t`` is taken as µs; the clock domain is Unix when times look like
epoch µs (after 2001), else sensor time. Offsets are array indexes.
"""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from evs_bridge.events import EVENT_DTYPE, ClockDomain, EventChunk, Events, RecordingInfo

_EPOCH_2001_US = 978_307_200_000_000
_POLARITY_NAMES = ("p", "on", "polarity")
_EVENTS_MEMBER = "events.npy"
_NPY_MAGIC = b"\x93NUMPY"


class UnsupportedArray(ValueError):
    """The array has no x/y/p/t fields, or is not a 1-D C-ordered array."""


def _read_npy_header(stream: IO[bytes]) -> tuple[np.dtype[Any], int]:
    """The dtype and length of the ``.npy`` array that ``stream`` is positioned at."""
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(stream)
    else:
        shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(stream)
    if len(shape) != 1 or fortran_order:
        raise UnsupportedArray(f"events must be a 1-D array, not shape {shape}")
    return dtype, int(shape[0])


def _is_integral(dtype: np.dtype[Any]) -> bool:
    return bool(np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.bool_))


class ArrayRecording:
    def __init__(self, path: Path, *, chunk_events: int = 65536) -> None:
        self.path = path
        self.chunk_events = chunk_events
        try:
            self._open(path)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as exc:
            if isinstance(exc, UnsupportedArray):
                raise
            raise UnsupportedArray(f"{path}: not a readable .npz/.npy array: {exc}") from exc

    def _open(self, path: Path) -> None:
        self._is_npz = zipfile.is_zipfile(path)
        width = height = None
        if self._is_npz:
            with zipfile.ZipFile(path) as archive:
                names = set(archive.namelist())
                if _EVENTS_MEMBER not in names:
                    raise UnsupportedArray(f"{path}: no 'events' member")
                with archive.open(_EVENTS_MEMBER) as member:
                    dtype, self._length = _read_npy_header(member)
            if {"width.npy", "height.npy"} <= names:
                with np.load(path) as small:
                    try:
                        width, height = int(small["width"]), int(small["height"])
                    except (TypeError, ValueError) as exc:
                        raise UnsupportedArray(
                            f"{path}: width and height must each be one integer ({exc})"
                        ) from None
        else:
            with path.open("rb") as stream:
                if stream.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
                    raise UnsupportedArray(
                        f"{path}: not a readable .npz/.npy array (neither a zip archive "
                        "nor a .npy file)"
                    )
            memmap: npt.NDArray[Any] = np.load(path, mmap_mode="r")
            if memmap.ndim != 1:
                raise UnsupportedArray(f"{path}: events must be a 1-D array")
            dtype, self._length = memmap.dtype, len(memmap)
        fields = dtype.names or ()
        polarity = next((n for n in _POLARITY_NAMES if n in fields), None)
        if polarity is None or not {"x", "y", "t"} <= set(fields):
            raise UnsupportedArray(f"{path}: fields {fields} lack x, y, p and t")
        inexact = [n for n in ("x", "y", polarity, "t") if not _is_integral(dtype[n])]
        if inexact:  # a float may be infinite, or past what the event fields hold
            raise UnsupportedArray(f"{path}: fields {', '.join(inexact)} must be integers")
        self._polarity = polarity
        first_t: int | None = None
        if width is None or height is None:
            width = height = 0
            for _, part in self._parts():
                width = max(width, min(int(part["x"].max()) + 1, _OUTSIDE))
                height = max(height, min(int(part["y"].max()) + 1, _OUTSIDE))
        for _, part in self._parts():
            first_t = int(part["t"][0])
            break
        is_unix = first_t is not None and first_t > _EPOCH_2001_US
        self._info = RecordingInfo(
            sensor="unknown",
            width=width,
            height=height,
            clock=ClockDomain.UNIX if is_unix else ClockDomain.SENSOR,
            format="npz" if self._is_npz else "npy",
            metadata={"events": self._length},
        )

    @property
    def info(self) -> RecordingInfo:
        return self._info

    def chunks(self) -> Iterator[EventChunk]:
        try:
            yield from self._chunks()
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
            raise UnsupportedArray(f"{self.path}: not a readable .npz/.npy array: {exc}") from exc

    def _chunks(self) -> Iterator[EventChunk]:
        for start, part in self._parts():
            events: Events = np.empty(len(part), dtype=EVENT_DTYPE)
            events["x"] = _pixel(part["x"])
            events["y"] = _pixel(part["y"])
            # Polarity 1 is "on"; 0 and -1 (a signed -1/+1 set, as MVSEC's) are "off".
            events["p"] = part[self._polarity] > 0
            events["t"] = part["t"]
            yield EventChunk(events, start, start + len(part))

    def _parts(self) -> Iterator[tuple[int, npt.NDArray[Any]]]:
        """Consecutive non-empty runs of at most ``chunk_events`` source records."""
        if not self._is_npz:
            memmap: npt.NDArray[Any] = np.load(self.path, mmap_mode="r")
            for start in range(0, len(memmap), self.chunk_events):
                yield start, memmap[start : start + self.chunk_events]
            return
        with zipfile.ZipFile(self.path) as archive, archive.open(_EVENTS_MEMBER) as member:
            dtype, length = _read_npy_header(member)
            for start in range(0, length, self.chunk_events):
                count = min(self.chunk_events, length - start)
                data = member.read(count * dtype.itemsize)
                if len(data) < count * dtype.itemsize:
                    raise UnsupportedArray(f"{self.path}: events member is truncated")
                yield start, np.frombuffer(data, dtype=dtype, count=count)


# A coordinate no uint16 pixel of a sensor has: what a value out of uint16's range
# becomes, so that the pipeline drops and counts it as outside the geometry (a cast would
# wrap 65541 onto pixel 5). An inferred width or height stops short of it.
_OUTSIDE = 65535


def _pixel(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``values`` as ``EVENT_DTYPE``'s uint16 pixels, out-of-range ones as ``_OUTSIDE``."""
    if values.dtype == np.uint16 or values.dtype == np.uint8:
        return values
    return np.where((values < 0) | (values > _OUTSIDE), _OUTSIDE, values)
