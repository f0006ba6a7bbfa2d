"""Decoders against the upstream golden sums, against each other, and on crafted word streams."""

from __future__ import annotations

import struct
from itertools import pairwise
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from evs_bridge.decoders import (
    DecodedChunk,
    Evt2Decoder,
    Evt3Decoder,
    UnknownFormat,
    nanoseconds,
    open_recording,
)
from evs_bridge.decoders.raw import UnsupportedRaw
from evs_bridge.decoders.rosbag import RosbagRecording, UnsupportedBag, parse_event_packet
from evs_bridge.events import EVENT_DTYPE, ClockDomain, EventChunk, Events

SAMPLES = Path(__file__).parents[2] / "data" / "evs-samples" / "event_camera_codecs"
EVT3_BAG = SAMPLES / "test_data_evt3_trigger" / "test_data_evt3_trigger_0.db3"
LIBCAER_BAG = SAMPLES / "test_data_libcaer_rollover" / "libcaer_rollover_0.db3"
EVT3_NPZ = SAMPLES / "prophesee1280x720_evt3_xypt.npz"
LIBCAER_NPZ = SAMPLES / "dvxplorer640x480_libcaer_xypt.npz"


def concatenated(chunks: list[EventChunk]) -> Events:
    return np.concatenate([c.events for c in chunks])


def golden(chunks: list[EventChunk]) -> tuple[int, int, int, int]:
    """Σt (ns, uint64 wrap), Σx, Σy, Σp as upstream's decoder_test.cpp sums them."""
    events = concatenated(chunks)
    t_ns = np.concatenate([nanoseconds(c) for c in chunks])
    return (
        int(t_ns.sum(dtype=np.uint64)),
        int(events["x"].sum(dtype=np.int64)),
        int(events["y"].sum(dtype=np.int64)),
        int(events["p"].sum(dtype=np.int64)),
    )


def all_triggers(chunks: list[EventChunk]) -> npt.NDArray[np.void]:
    found = [c.triggers for c in chunks if isinstance(c, DecodedChunk) and c.triggers is not None]
    return np.concatenate(found)


def words(*values: int) -> bytes:
    return np.array(values, dtype="<u2").tobytes()


def decode_all(decoder: Evt3Decoder | Evt2Decoder, data: bytes, piece: int) -> Events:
    return np.concatenate([decoder.decode(data[i : i + piece]) for i in range(0, len(data), piece)])


def evt3_stream() -> bytes:
    """The EVT 3.0 bytes of every message of the Prophesee bag, in order."""
    return b"".join(p.events for p in RosbagRecording(EVT3_BAG).packets())


class TestGoldenSums:
    def test_evt3_bag_reproduces_upstream_sums(self) -> None:
        chunks = list(open_recording(EVT3_BAG).chunks())
        assert golden(chunks) == (1222326831810000, 42078718, 31656267, 41439)
        assert len(concatenated(chunks)) == 82469

    def test_evt3_bag_triggers_reproduce_upstream_sums(self) -> None:
        triggers = all_triggers(list(open_recording(EVT3_BAG).chunks()))
        assert len(triggers) == 2
        assert int(triggers["t"].sum()) * 1000 == 29096982000
        assert int(triggers["edge"].sum()) == 1
        assert int(triggers["id"].sum()) == 0

    def test_libcaer_bag_reproduces_upstream_sums_in_exact_nanoseconds(self) -> None:
        chunks = list(open_recording(LIBCAER_BAG).chunks())
        assert golden(chunks) == (15762826572202229126, 111651612, 82801007, 181908)
        assert len(concatenated(chunks)) == 334331

    def test_libcaer_microseconds_are_the_floor_of_the_nanoseconds(self) -> None:
        for chunk in open_recording(LIBCAER_BAG).chunks():
            ns = nanoseconds(chunk)
            assert np.array_equal(chunk.events["t"], (ns // np.uint64(1000)).astype(np.int64))

    @pytest.mark.parametrize(("bag", "npz"), [(EVT3_BAG, EVT3_NPZ), (LIBCAER_BAG, LIBCAER_NPZ)])
    def test_bag_decodes_equal_the_saved_decodes(self, bag: Path, npz: Path) -> None:
        from_bag = concatenated(list(open_recording(bag).chunks()))
        from_npz = concatenated(list(open_recording(npz).chunks()))
        assert from_bag.dtype == EVENT_DTYPE
        assert np.array_equal(from_bag, from_npz)


class TestRosbag:
    def test_info_names_sensor_geometry_and_clock(self) -> None:
        evt3 = open_recording(EVT3_BAG).info
        libcaer = open_recording(LIBCAER_BAG).info
        assert (evt3.width, evt3.height, evt3.clock, evt3.format) == (
            1280,
            720,
            ClockDomain.SENSOR,
            "rosbag2-evt3",
        )
        assert (libcaer.width, libcaer.height, libcaer.clock, libcaer.format) == (
            640,
            480,
            ClockDomain.UNIX,
            "rosbag2-libcaer",
        )
        assert evt3.metadata["messages"] == 105
        assert libcaer.metadata["messages"] == 201

    @pytest.mark.parametrize(("bag", "messages"), [(EVT3_BAG, 105), (LIBCAER_BAG, 201)])
    def test_chunks_tile_the_messages_whatever_the_chunk_size(
        self, bag: Path, messages: int
    ) -> None:
        whole = concatenated(list(open_recording(bag).chunks()))
        chunks = list(open_recording(bag, chunk_events=1000).chunks())
        assert len(chunks) > 10
        assert chunks[0].offset_start == 0
        assert chunks[-1].offset_end == messages
        assert all(a.offset_end == b.offset_start for a, b in pairwise(chunks))
        assert np.array_equal(concatenated(chunks), whole)


class TestEvt3Raw:
    def write_raw(self, tmp_path: Path, body: bytes, header: str) -> Path:
        path = tmp_path / "recording.raw"
        path.write_bytes(header.encode() + body)
        return path

    @pytest.mark.parametrize(
        "header",
        [
            "% evt 3.0\n% geometry 1280x720\n% plugin_name hal_plugin_imx636_evk4\n% end\n",
            "% format EVT3;height=720;width=1280\n% end\n",
        ],
    )
    def test_raw_file_of_the_bag_stream_decodes_identically(
        self, tmp_path: Path, header: str
    ) -> None:
        path = self.write_raw(tmp_path, evt3_stream(), header)
        recording = open_recording(path, chunk_events=3001)
        assert recording.info.format == "evt3"
        assert (recording.info.width, recording.info.height) == (1280, 720)
        assert recording.info.clock == ClockDomain.SENSOR
        chunks = list(recording.chunks())
        assert golden(chunks) == (1222326831810000, 42078718, 31656267, 41439)
        assert np.array_equal(
            concatenated(chunks), concatenated(list(open_recording(EVT3_NPZ).chunks()))
        )
        assert len(all_triggers(chunks)) == 2

    def test_chunk_offsets_are_the_file_bytes_they_came_from(self, tmp_path: Path) -> None:
        header = "% evt 3.0\n% geometry 1280x720\n% end\n"
        path = self.write_raw(tmp_path, evt3_stream(), header)
        chunks = list(open_recording(path, chunk_events=5000).chunks())
        assert chunks[0].offset_start == len(header)
        assert chunks[-1].offset_end == path.stat().st_size
        assert all(a.offset_end == b.offset_start for a, b in pairwise(chunks))
        # Re-decoding a chunk's byte span with the state before it gives the same events.
        data = path.read_bytes()
        decoder = Evt3Decoder()
        for chunk in chunks:
            assert np.array_equal(
                decoder.decode(data[chunk.offset_start : chunk.offset_end]), chunk.events
            )

    def test_header_without_geometry_is_refused(self, tmp_path: Path) -> None:
        path = self.write_raw(tmp_path, words(0x8001), "% evt 3.0\n% end\n")
        with pytest.raises(UnsupportedRaw):
            open_recording(path)


class TestEvt3Decoder:
    @pytest.mark.parametrize("piece", [1, 3, 7, 1001, 65536])
    def test_feeding_in_pieces_equals_feeding_whole(self, piece: int) -> None:
        stream = evt3_stream()[: min(120_000, 6000 + 100 * piece)]  # one byte a call is slow
        whole_decoder = Evt3Decoder()
        whole = whole_decoder.decode(stream)
        pieces_decoder = Evt3Decoder()
        assert np.array_equal(decode_all(pieces_decoder, stream, piece), whole)
        assert np.array_equal(pieces_decoder.take_triggers(), whole_decoder.take_triggers())

    def test_words_before_the_first_time_high_and_time_low_are_skipped(self) -> None:
        decoder = Evt3Decoder()
        stream = words(
            0x0005,  # ADDR_Y 5: before any time, ignored
            0x2001,  # ADDR_X 1: skipped
            0x6007,  # TIME_LOW before any TIME_HIGH: skipped
            0x8002,  # TIME_HIGH 2
            0x2002,  # ADDR_X 2: no TIME_LOW yet, skipped
            0x6003,  # TIME_LOW 3: time valid from here
            0x0009,  # ADDR_Y 9
            0x2804,  # ADDR_X 4, polarity 1
        )
        events = decoder.decode(stream)
        assert events.tolist() == [(4, 9, 1, (2 << 12) | 3)]

    def test_time_high_and_time_low_split_across_calls(self) -> None:
        decoder = Evt3Decoder()
        assert len(decoder.decode(words(0x8002, 0x2001))) == 0
        had_time = decoder.has_time
        events = decoder.decode(words(0x6003, 0x0001, 0x2004))
        assert (had_time, decoder.has_time) == (False, True)
        assert events.tolist() == [(4, 1, 0, (2 << 12) | 3)]

    def test_time_high_wrap_adds_two_to_the_24_microseconds(self) -> None:
        decoder = Evt3Decoder()
        events = decoder.decode(
            words(0x8FFF, 0x6FF0, 0x0001, 0x2001, 0x8000, 0x6005, 0x2002, 0x8001, 0x6000, 0x2003)
        )
        assert events["t"].tolist() == [(0xFFF << 12) | 0xFF0, (1 << 24) + 5, (1 << 24) + 4096]

    def test_wrap_detected_across_calls(self) -> None:
        decoder = Evt3Decoder()
        decoder.decode(words(0x8FFE, 0x6000, 0x0001, 0x2001))
        events = decoder.decode(words(0x8003, 0x6002, 0x2002))
        assert events["t"].tolist() == [(1 << 24) + (3 << 12) + 2]

    def test_small_backward_steps_are_not_wraps(self) -> None:
        decoder = Evt3Decoder()
        events = decoder.decode(
            words(
                0x8100, 0x6050, 0x0001, 0x2001,  # t = 0x100050
                0x604C, 0x2002,  # TIME_LOW steps back 4 µs: jitter
                0x80FC, 0x6000, 0x2003,  # TIME_HIGH steps back 4 counts: jitter
                0x8101, 0x6000, 0x2004,
            )
        )  # fmt: skip
        assert events["t"].tolist() == [0x100050, 0x10004C, 0x0FC000, 0x101000]

    def test_vectors_expand_from_the_base_column(self) -> None:
        decoder = Evt3Decoder()
        events = decoder.decode(
            words(
                0x8000, 0x6001, 0x0003,
                0x3814,  # VECT_BASE_X x=20, polarity 1
                0x4805,  # VECT_12 bits 0, 2, 11 -> x 20, 22, 31
                0x5081,  # VECT_8 bits 0, 7 -> x 32, 39
                0x5001,  # VECT_8 bit 0 -> x 40
                0x2005,  # ADDR_X 5, polarity 0
                0x000A,  # ADDR_Y 10
                0x2006,
            )
        )  # fmt: skip
        assert events[["x", "y", "p"]].tolist() == [
            (20, 3, 1),
            (22, 3, 1),
            (31, 3, 1),
            (32, 3, 1),
            (39, 3, 1),
            (40, 3, 1),
            (5, 3, 0),
            (6, 10, 0),
        ]

    def test_triggers_are_kept_beside_the_events(self) -> None:
        decoder = Evt3Decoder()
        decoder.decode(words(0x8001, 0x6002, 0xA301, 0x6004, 0xA000))
        triggers = decoder.take_triggers()
        assert triggers.tolist() == [(4098, 3, 1), (4100, 0, 0)]
        assert len(decoder.take_triggers()) == 0


def evt2_word(kind: int, payload: int) -> int:
    return (kind << 28) | payload


def cd(kind: int, t_low: int, x: int, y: int) -> int:
    return evt2_word(kind, (t_low << 22) | (x << 11) | y)


class TestEvt2:
    def stream(self) -> bytes:
        values = [
            cd(1, 5, 1, 1),  # before the first TIME_HIGH: skipped
            evt2_word(8, 10),  # time = 10 << 6
            cd(1, 5, 3, 4),
            cd(0, 63, 639, 479),
            cd(0, 1, 640, 0),  # outside a 640x480 sensor: the pipeline drops it
            evt2_word(0xA, (7 << 22) | (2 << 8) | 1),  # trigger id 2, rising
            evt2_word(8, (1 << 28) - 1),  # the last time high before the 34-bit wrap
            cd(1, 0, 7, 8),
            evt2_word(8, 0),  # wrap
            cd(0, 2, 9, 9),
        ]
        return np.array(values, dtype="<u4").tobytes()

    def expected(self) -> list[tuple[int, int, int, int]]:
        return [
            (3, 4, 1, (10 << 6) | 5),
            (639, 479, 0, (10 << 6) | 63),
            (640, 0, 0, (10 << 6) | 1),
            (7, 8, 1, ((1 << 28) - 1) << 6),
            (9, 9, 0, (1 << 34) | 2),
        ]

    @pytest.mark.parametrize("piece", [1, 3, 5, 1000])
    def test_hand_made_words_decode_in_any_pieces(self, piece: int) -> None:
        decoder = Evt2Decoder()
        assert decode_all(decoder, self.stream(), piece).tolist() == self.expected()
        assert decoder.take_triggers().tolist() == [((10 << 6) | 7, 2, 1)]

    def test_raw_file_with_evt2_header(self, tmp_path: Path) -> None:
        path = tmp_path / "evt2.raw"
        path.write_bytes(b"% evt 2.0\n% geometry 640x480\n% end\n" + self.stream())
        recording = open_recording(path, chunk_events=2)
        assert recording.info.format == "evt2"
        assert concatenated(list(recording.chunks())).tolist() == self.expected()


class TestArrays:
    def test_npy_with_other_field_order_and_widths(self, tmp_path: Path) -> None:
        source = np.zeros(5, dtype=[("t", "<u8"), ("x", "<i4"), ("y", "<i4"), ("on", "?")])
        source["t"] = [10, 20, 30, 40, 50]
        source["x"] = [1, 2, 3, 4, 9]
        source["y"] = [5, 6, 7, 8, 2]
        source["on"] = [True, False, True, False, True]
        path = tmp_path / "events.npy"
        np.save(path, source)
        recording = open_recording(path, chunk_events=2)
        assert (recording.info.width, recording.info.height) == (10, 9)
        assert recording.info.clock == ClockDomain.SENSOR
        chunks = list(recording.chunks())
        assert [(c.offset_start, c.offset_end) for c in chunks] == [(0, 2), (2, 4), (4, 5)]
        assert concatenated(chunks).tolist() == [
            (1, 5, 1, 10),
            (2, 6, 0, 20),
            (3, 7, 1, 30),
            (4, 8, 0, 40),
            (9, 2, 1, 50),
        ]

    def test_compressed_npz_streams_in_chunks(self, tmp_path: Path) -> None:
        expected = concatenated(list(open_recording(LIBCAER_NPZ).chunks()))[:10000]
        path = tmp_path / "events.npz"
        np.savez_compressed(path, events=expected)  # no width/height: taken from the events
        recording = open_recording(path, chunk_events=999)
        assert (recording.info.width, recording.info.height) == (
            int(expected["x"].max()) + 1,
            int(expected["y"].max()) + 1,
        )
        chunks = list(recording.chunks())
        assert len(chunks) == 11
        assert chunks[-1].offset_end == 10000
        assert np.array_equal(concatenated(chunks), expected)

    def test_npz_carries_geometry_and_unix_clock(self) -> None:
        info = open_recording(LIBCAER_NPZ).info
        assert (info.width, info.height, info.clock, info.format) == (
            640,
            480,
            ClockDomain.UNIX,
            "npz",
        )


class TestAedat:
    def test_file_written_by_dv_processing_decodes(self, tmp_path: Path) -> None:
        dv = pytest.importorskip("dv_processing")
        path = tmp_path / "events.aedat4"
        config = dv.io.MonoCameraWriter.EventOnlyConfig("DVXplorer_test", (640, 480))
        writer = dv.io.MonoCameraWriter(str(path), config)
        expected = concatenated(list(open_recording(LIBCAER_NPZ).chunks()))[:3000]
        for start in range(0, len(expected), 1000):
            store = dv.EventStore()
            for x, y, p, t in expected[start : start + 1000].tolist():
                store.push_back(t, x, y, bool(p))
            writer.writeEvents(store)
        del writer  # closes the file
        recording = open_recording(path, chunk_events=1500)
        assert recording.info.format == "aedat4"
        assert recording.info.clock == ClockDomain.UNIX
        assert (recording.info.width, recording.info.height) == (640, 480)
        chunks = list(recording.chunks())
        assert np.array_equal(concatenated(chunks), expected)
        assert chunks[0].offset_start == 0
        assert all(a.offset_end == b.offset_start for a, b in pairwise(chunks))


def test_unknown_content_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(UnknownFormat):
        open_recording(path)


def cdr_event_packet(*, is_bigendian: int, events: bytes, length: int | None = None) -> bytes:
    """A CDR little-endian ``EventPacket`` with a 2x2 geometry and the given events field."""
    body = bytearray()

    def put(fmt: str, value: int) -> None:
        size = struct.calcsize(fmt)
        body.extend(bytes(-len(body) % size))
        body.extend(struct.pack(fmt, value))

    def put_string(text: str) -> None:
        raw = text.encode() + b"\x00"
        put("<I", len(raw))
        body.extend(raw)

    put("<i", 1)
    put("<I", 0)
    put_string("cam")
    put("<I", 2)
    put("<I", 2)
    put("<Q", 0)
    put("<Q", 0)
    put_string("libcaer")
    put("<B", is_bigendian)
    put("<I", len(events) if length is None else length)
    body.extend(events)
    return b"\x00\x01\x00\x00" + bytes(body)


class TestEventPacketChecks:
    def test_a_little_endian_packet_parses(self) -> None:
        packet = parse_event_packet(cdr_event_packet(is_bigendian=0, events=bytes(8)))
        assert (packet.encoding, packet.width, packet.events) == ("libcaer", 2, bytes(8))

    def test_a_big_endian_packet_is_refused(self) -> None:
        with pytest.raises(UnsupportedBag, match="big-endian"):
            parse_event_packet(cdr_event_packet(is_bigendian=1, events=bytes(8)))

    def test_an_events_length_past_the_message_is_refused(self) -> None:
        with pytest.raises(UnsupportedBag, match="passes the end"):
            parse_event_packet(cdr_event_packet(is_bigendian=0, events=bytes(8), length=16))
