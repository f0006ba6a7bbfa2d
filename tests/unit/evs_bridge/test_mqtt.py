"""The MQTT packet format, without a broker (the integration tests use the real one)."""

from __future__ import annotations

import numpy as np
import pytest

from evs_bridge.decoders import Evt3Decoder
from evs_bridge.events import EVENT_DTYPE, ClockDomain
from evs_bridge.mqtt import (
    HEADER,
    BadPacket,
    Broker,
    Encoding,
    decode_packet,
    encode_evt3_packet,
    encode_packet,
)


def some_events() -> np.ndarray:
    events = np.zeros(3, dtype=EVENT_DTYPE)
    events["x"], events["y"], events["p"], events["t"] = [1, 2, 3], [4, 5, 6], [0, 1, 1], [7, 8, 9]
    return events


class TestPackets:
    def test_packed_events_round_trip(self) -> None:
        data = encode_packet(
            some_events(), width=640, height=480, sequence=42, clock=ClockDomain.UNIX
        )
        assert len(data) == HEADER.size + 3 * 13
        packet = decode_packet(data)
        assert (packet.encoding, packet.clock, packet.width, packet.height, packet.sequence) == (
            Encoding.PACKED,
            ClockDomain.UNIX,
            640,
            480,
            42,
        )
        decoded = np.frombuffer(packet.payload, dtype=EVENT_DTYPE)
        assert decoded.tolist() == some_events().tolist()

    def test_the_header_layout_is_the_documented_one(self) -> None:
        data = encode_packet(some_events()[:0], width=1280, height=720, sequence=1)
        assert data == b"EVSB\x01\x02\x00\x00" + (1280).to_bytes(2, "little") + (720).to_bytes(
            2, "little"
        ) + (1).to_bytes(8, "little")

    def test_evt3_words_decode_with_the_stateful_decoder(self) -> None:
        words = np.array(
            [0x8000 | 0x001, 0x6000 | 0x010, 0x0000 | 100, 0x2000 | 0x800 | 200], dtype="<u2"
        )
        packet = decode_packet(
            encode_evt3_packet(words.tobytes(), width=1280, height=720, sequence=0)
        )
        assert (packet.encoding, packet.clock) == (Encoding.EVT3, ClockDomain.SENSOR)
        [event] = Evt3Decoder(1280, 720).decode(packet.payload).tolist()
        assert event == (200, 100, 1, (1 << 12) | 0x010)

    @pytest.mark.parametrize(
        ("data", "why"),
        [
            (b"EVSB", "shorter"),
            (b"XXXX" + bytes(16), "magic"),
            (HEADER.pack(b"EVSB", 9, 2, 0, 0, 1, 1, 0), "version"),
            (HEADER.pack(b"EVSB", 1, 7, 0, 0, 1, 1, 0), "encoding"),
            (HEADER.pack(b"EVSB", 1, 2, 0, 0, 1, 1, 0) + b"\x00" * 5, "whole"),
            (HEADER.pack(b"EVSB", 1, 2, 0, 0, 0, 1, 0), "width"),
        ],
    )
    def test_a_bad_packet_says_why(self, data: bytes, why: str) -> None:
        with pytest.raises(BadPacket, match=why):
            decode_packet(data)


class TestBroker:
    @pytest.mark.parametrize(
        ("url", "host", "port"),
        [
            ("mqtt://10.0.0.2:1884", "10.0.0.2", 1884),
            ("broker.local", "broker.local", 1883),
            ("127.0.0.1:1883", "127.0.0.1", 1883),
        ],
    )
    def test_urls(self, url: str, host: str, port: int) -> None:
        assert Broker.parse(url) == Broker(host, port)

    def test_a_non_mqtt_url_is_refused(self) -> None:
        with pytest.raises(ValueError, match="mqtt://"):
            Broker.parse("http://example.com")
