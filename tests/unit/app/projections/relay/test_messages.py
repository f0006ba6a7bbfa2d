"""The CloudEvents NATS binding: structured and binary messages for one stored event."""

from __future__ import annotations

import base64

import orjson

from app.projections.relay.messages import encode_header_value, headers_and_payload

STORED = {
    "specversion": "1.0",
    "id": "e-1",
    "source": "/cameras/gate",
    "type": "com.example.frame.v1",
    "subject": "caf\u00e9 au lait",
    "position": 7,
    "stream": "cam-1",
    "streamversion": 3,
    "causationid": "a,b",
    "active": True,
    "hash": "ab" * 32,
    "data": {"frame": 1},
}


class TestStructured:
    def test_the_payload_is_the_stored_json_byte_for_byte(self) -> None:
        document = orjson.dumps(STORED)
        headers, payload = headers_and_payload(document, "structured")
        assert payload is document
        assert headers == {"Content-Type": "application/cloudevents+json"}


class TestBinary:
    def test_each_attribute_is_a_ce_header_and_the_payload_is_the_data(self) -> None:
        headers, payload = headers_and_payload(orjson.dumps(STORED), "binary")
        assert "Content-Type" not in headers
        assert headers["ce-id"] == "e-1"
        assert headers["ce-subject"] == "caf%C3%A9%20au%20lait"
        assert headers["ce-position"] == "7"
        assert headers["ce-streamversion"] == "3"
        assert headers["ce-causationid"] == "a,b"
        assert headers["ce-active"] == "true"
        assert "ce-data" not in headers
        assert orjson.loads(payload) == {"frame": 1}

    def test_binary_data_travels_as_its_bytes(self) -> None:
        event = {**STORED, "datacontenttype": "application/octet-stream"}
        del event["data"]
        event["data_base64"] = base64.b64encode(b"\x00\xff").decode()
        headers, payload = headers_and_payload(orjson.dumps(event), "binary")
        assert payload == b"\x00\xff"
        assert headers["ce-datacontenttype"] == "application/octet-stream"
        assert "ce-data_base64" not in headers

    def test_text_data_of_a_text_type_travels_as_its_utf8(self) -> None:
        event = {**STORED, "datacontenttype": "text/plain", "data": "h\u00e9"}
        _, payload = headers_and_payload(orjson.dumps(event), "binary")
        assert payload == "h\u00e9".encode()

    def test_an_event_without_data_has_an_empty_payload(self) -> None:
        event = {k: v for k, v in STORED.items() if k != "data"}
        assert headers_and_payload(orjson.dumps(event), "binary")[1] == b""


def test_header_values_are_percent_encoded_as_the_binding_says() -> None:
    assert encode_header_value('a "b" 100%') == "a%20%22b%22%20100%25"
    assert encode_header_value("\u20ac") == "%E2%82%AC"
    assert encode_header_value("plain-ascii_~!") == "plain-ascii_~!"
