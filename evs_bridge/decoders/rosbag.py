"""rosbag2 ``.db3`` bags of ``event_camera_msgs/EventPacket``, read with the stdlib only.

A rosbag2 sqlite3 bag is three tables (``topics``, ``messages``, ``metadata``); each message is
a CDR little-endian blob, so decoding one needs neither ROS nor a CDR library: ``packets`` walks
the fields in order, aligning each to its size relative to the end of the 4-byte encapsulation
header. Two encodings are decoded:

- ``evt3``: the ``events`` bytes of consecutive messages form one Prophesee EVT 3.0 stream (the
  sensor state carries across messages), decoded by ``Evt3Decoder``; sensor-clock µs.
- ``libcaer``: 8 bytes per event (``u32``: polarity bit 1, y bits 2-16, x bits 17-31; ``i32``
  µs since ``time_base``). Time in ns = ``time_base + ts * 1000``, plus 2^31 µs for each
  backwards step of ``ts`` inside one message (the counter's rollover), all modulo 2^64 as the
  upstream decoder computes it. ``time_base`` has sub-µs digits, so chunks carry the exact
  ``t_ns``; ``t`` in µs is its floor.

Chunks cover whole messages: ``offset_start``/``offset_end`` are indexes of the topic's
messages in timestamp order. Rows are read one at a time, so memory stays bounded.
"""

from __future__ import annotations

import sqlite3
import struct
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evs_bridge.decoders.evt3 import Evt3Decoder
from evs_bridge.decoders.recording import DecodedChunk, Nanoseconds, Triggers
from evs_bridge.events import EVENT_DTYPE, ClockDomain, EventChunk, Events, RecordingInfo

EVENT_PACKET_TYPE = "event_camera_msgs/msg/EventPacket"
_LIBCAER_DTYPE = np.dtype([("data", "<u4"), ("ts", "<i4")])
_ROLLOVER_NS = np.uint64((1 << 31) * 1000)


class UnsupportedBag(ValueError):
    """The bag has no EventPacket topic, its encoding is not one we decode, or it is not a
    readable bag (a corrupt database, a malformed message)."""


@dataclass(frozen=True, slots=True)
class EventPacket:
    """The fields of one ``event_camera_msgs/EventPacket`` message that decoding needs."""

    stamp_ns: int
    frame_id: str
    height: int
    width: int
    seq: int
    time_base: int
    encoding: str
    events: bytes


def parse_event_packet(blob: bytes) -> EventPacket:
    """Parse one CDR-serialised EventPacket (little-endian only, as ROS 2 writes it)."""
    if blob[:2] != b"\x00\x01":
        raise UnsupportedBag(f"not a CDR little-endian message (header {blob[:4].hex()})")
    body = memoryview(blob)[4:]
    position = 0

    def align(size: int) -> None:
        nonlocal position
        position += -position % size

    def read(fmt: str) -> int:
        nonlocal position
        size = struct.calcsize(fmt)
        align(size)
        (value,) = struct.unpack_from(fmt, body, position)
        position += size
        return int(value)

    def read_string() -> str:
        nonlocal position
        length = read("<I")
        text = bytes(body[position : position + length]).rstrip(b"\x00").decode()
        position += length
        return text

    sec = read("<i")
    nanosec = read("<I")
    frame_id = read_string()
    height = read("<I")
    width = read("<I")
    seq = read("<Q")
    time_base = read("<Q")
    encoding = read_string()
    if read("<B"):
        # The decoders read little-endian words; a big-endian packet would decode as noise.
        raise UnsupportedBag("is_bigendian is 1: big-endian event packets are not decoded")
    length = read("<I")
    if position + length > len(body):
        raise UnsupportedBag(
            f"events length {length} passes the end of the {len(blob)}-byte message"
        )
    events = bytes(body[position : position + length])
    return EventPacket(
        stamp_ns=sec * 1_000_000_000 + nanosec,
        frame_id=frame_id,
        height=height,
        width=width,
        seq=seq,
        time_base=time_base,
        encoding=encoding,
        events=events,
    )


def _parse(path: Path, index: int, blob: object) -> EventPacket:
    """``parse_event_packet``, with errors that name the file and the message index."""
    if not isinstance(blob, bytes):
        raise UnsupportedBag(f"{path}: message {index} is not a blob")
    try:
        return parse_event_packet(blob)
    except (struct.error, UnicodeDecodeError, UnsupportedBag) as exc:
        detail = "truncated" if isinstance(exc, struct.error) else str(exc)
        raise UnsupportedBag(f"{path}: message {index}: {detail}") from exc


def decode_libcaer(payload: bytes, time_base: int) -> tuple[Events, Nanoseconds]:
    """One libcaer message's events, with their exact times in ns."""
    raw = np.frombuffer(payload, dtype=_LIBCAER_DTYPE, count=len(payload) // 8)
    # As upstream: the i32 is sign-extended into a u64, and a step back is one rollover.
    ts = raw["ts"].astype(np.int64).astype(np.uint64)
    previous = np.empty_like(ts)
    if len(ts):
        previous[0] = 0
        previous[1:] = ts[:-1]
    rollovers = np.cumsum(ts < previous, dtype=np.uint64)
    t_ns = np.uint64(time_base) + rollovers * _ROLLOVER_NS + ts * np.uint64(1000)
    events = np.empty(len(raw), dtype=EVENT_DTYPE)
    events["x"] = (raw["data"] >> 17) & 0x7FFF
    events["y"] = (raw["data"] >> 2) & 0x7FFF
    events["p"] = (raw["data"] >> 1) & 1
    events["t"] = (t_ns // np.uint64(1000)).astype(np.int64)
    return events, t_ns


class RosbagRecording:
    """A rosbag2 sqlite3 bag with one ``EventPacket`` topic (the first, if there are several)."""

    def __init__(self, path: Path, *, chunk_events: int = 65536) -> None:
        self.path = path
        self.chunk_events = chunk_events
        try:
            self._open(path)
        except sqlite3.DatabaseError as exc:
            raise UnsupportedBag(f"{path}: not a readable rosbag2 database: {exc}") from exc

    def _open(self, path: Path) -> None:
        with closing(self._connect()) as db:
            row = db.execute(
                "SELECT id, name FROM topics WHERE type = ? ORDER BY id", (EVENT_PACKET_TYPE,)
            ).fetchone()
            if row is None:
                raise UnsupportedBag(f"{path}: no {EVENT_PACKET_TYPE} topic")
            self._topic_id, topic = int(row[0]), str(row[1])
            count, first = db.execute(
                "SELECT count(*), (SELECT data FROM messages WHERE topic_id = ?1"
                " ORDER BY timestamp, id LIMIT 1) FROM messages WHERE topic_id = ?1",
                (self._topic_id,),
            ).fetchone()
        if first is None:
            raise UnsupportedBag(f"{path}: topic {topic} has no messages")
        packet = _parse(path, 0, first)
        if packet.encoding not in ("evt3", "libcaer"):
            raise UnsupportedBag(f"{path}: encoding {packet.encoding!r} is not decoded")
        self._encoding = packet.encoding
        is_evt3 = packet.encoding == "evt3"
        self._info = RecordingInfo(
            sensor="prophesee-evt3" if is_evt3 else "inivation-libcaer",
            width=packet.width,
            height=packet.height,
            clock=ClockDomain.SENSOR if is_evt3 else ClockDomain.UNIX,
            format=f"rosbag2-{packet.encoding}",
            metadata={"topic": topic, "frame_id": packet.frame_id, "messages": int(count)},
        )

    @property
    def info(self) -> RecordingInfo:
        return self._info

    def chunks(self) -> Iterator[EventChunk]:
        decoder = Evt3Decoder()
        pending: list[Events] = []
        pending_ns: list[Nanoseconds] = []
        pending_triggers: list[Triggers] = []
        held = 0
        start = 0
        for index, packet in enumerate(self.packets()):
            if self._encoding == "evt3":
                pending.append(decoder.decode(packet.events))
                pending_triggers.append(decoder.take_triggers())
            else:
                events, t_ns = decode_libcaer(packet.events, packet.time_base)
                pending.append(events)
                pending_ns.append(t_ns)
            held += len(pending[-1])
            if held >= self.chunk_events:
                yield self._chunk(pending, pending_ns, pending_triggers, start, index + 1)
                pending, pending_ns, pending_triggers, held, start = [], [], [], 0, index + 1
        if pending:
            yield self._chunk(pending, pending_ns, pending_triggers, start, start + len(pending))

    def packets(self) -> Iterator[EventPacket]:
        """The topic's messages in timestamp order, parsed one at a time."""
        try:
            with closing(self._connect()) as db:
                rows = db.execute(
                    "SELECT data FROM messages WHERE topic_id = ? ORDER BY timestamp, id",
                    (self._topic_id,),
                )
                for index, (blob,) in enumerate(rows):
                    packet = _parse(self.path, index, blob)
                    yield packet
        except sqlite3.DatabaseError as exc:
            raise UnsupportedBag(f"{self.path}: not a readable rosbag2 database: {exc}") from exc

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)

    @staticmethod
    def _chunk(
        events: list[Events],
        t_ns: list[Nanoseconds],
        triggers: list[Triggers],
        start: int,
        end: int,
    ) -> DecodedChunk:
        return DecodedChunk(
            events=np.concatenate(events),
            offset_start=start,
            offset_end=end,
            t_ns=np.concatenate(t_ns) if t_ns else None,
            triggers=np.concatenate(triggers) if triggers else None,
        )
