"""The MQTT packet format: one message is one packet of a sensor's stream.

Packet (all little-endian)::

    offset size field
    0      4    magic     b"EVSB"
    4      1    version   1
    5      1    encoding  1 = EVT 3.0 words (u16, as the sensor emits them)
                          2 = packed events: 13 bytes each, x u16, y u16, p u8, t i64 (µs),
                              the ``EVENT_DTYPE`` layout
    6      1    clock     0 = sensor time, 1 = Unix-epoch µs (packed events only; EVT 3.0
                          time is always sensor time)
    7      1    flags     0 (reserved)
    8      2    width     sensor geometry, pixels
    10     2    height
    12     8    sequence  u64, 0 for a stream's first packet, +1 for each next one
    20     ...  payload

``encode_packet`` / ``encode_evt3_packet`` build packets and ``decode_packet`` checks and
splits one: a packet with another magic or version, an unknown encoding or clock, non-zero
reserved flags, a zero geometry or one above ``MAX_SIDE_PX`` per side (the filters allocate
per pixel), or a payload of partial items raises ``BadPacket``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from evs_bridge.events import EVENT_DTYPE, MAX_SIDE_PX, ClockDomain, Events

MAGIC = b"EVSB"
VERSION = 1
HEADER = struct.Struct("<4sBBBBHHQ")


class Encoding(IntEnum):
    EVT3 = 1
    PACKED = 2


class BadPacket(ValueError):
    """The payload is not a packet of this format."""


@dataclass(frozen=True, slots=True)
class Packet:
    encoding: Encoding
    clock: ClockDomain
    width: int
    height: int
    sequence: int
    payload: bytes


def encode_packet(
    events: Events,
    *,
    width: int,
    height: int,
    sequence: int,
    clock: ClockDomain = ClockDomain.SENSOR,
) -> bytes:
    """A packed-events packet holding ``events`` (``EVENT_DTYPE``)."""
    header = HEADER.pack(
        MAGIC,
        VERSION,
        Encoding.PACKED,
        1 if clock is ClockDomain.UNIX else 0,
        0,
        width,
        height,
        sequence,
    )
    return header + np.ascontiguousarray(events, dtype=EVENT_DTYPE).tobytes()


def encode_evt3_packet(words: bytes, *, width: int, height: int, sequence: int) -> bytes:
    """An EVT 3.0 packet: ``words`` as the sensor emitted them (little-endian u16)."""
    return HEADER.pack(MAGIC, VERSION, Encoding.EVT3, 0, 0, width, height, sequence) + words


def decode_packet(data: bytes) -> Packet:
    if len(data) < HEADER.size:
        raise BadPacket(f"{len(data)} bytes is shorter than the {HEADER.size}-byte header")
    magic, version, encoding, clock, flags, width, height, sequence = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise BadPacket(f"magic {magic!r} is not {MAGIC!r}")
    if version != VERSION:
        raise BadPacket(f"version {version} is not {VERSION}")
    if encoding not in (Encoding.EVT3, Encoding.PACKED) or clock not in (0, 1):
        raise BadPacket(f"encoding {encoding} or clock {clock} is unknown")
    payload = data[HEADER.size :]
    item = EVENT_DTYPE.itemsize if encoding == Encoding.PACKED else 2
    if len(payload) % item:
        raise BadPacket(f"payload of {len(payload)} bytes is not whole {item}-byte items")
    if flags != 0:
        raise BadPacket(f"flags {flags} are reserved and must be 0")
    if width == 0 or height == 0:
        raise BadPacket("width and height must not be 0")
    if width > MAX_SIDE_PX or height > MAX_SIDE_PX:
        raise BadPacket(f"geometry {width}x{height} is above {MAX_SIDE_PX}x{MAX_SIDE_PX}")
    return Packet(
        encoding=Encoding(encoding),
        clock=ClockDomain.UNIX
        if clock == 1 and encoding == Encoding.PACKED
        else ClockDomain.SENSOR,
        width=width,
        height=height,
        sequence=sequence,
        payload=payload,
    )
