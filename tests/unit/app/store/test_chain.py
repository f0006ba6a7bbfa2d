"""The canonical encoding behind the hash chain: stable, and blind to JSONB's rewrites."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from app.store.chain import GENESIS_HASH, ChainRecord, canonical_bytes, encode_json, link

RECORD = ChainRecord(
    position=1,
    tenant="acme",
    id="e-1",
    source="/s",
    type="t",
    subject=None,
    time="2026-11-30T12:00:00.123456789Z",
    recorded_at=datetime(2026, 11, 30, 12, 0, 1, 5, tzinfo=UTC),
    stream="/s",
    stream_version=1,
    datacontenttype=None,
    dataschema=None,
    has_data=True,
    data={"b": 1.0, "a": [1e21, "é"]},
    data_binary=None,
    extensions={},
    causes=(),
    correlation_id=None,
    model_name=None,
    model_version=None,
    model_signature=None,
)


class TestEncodeJson:
    def test_keys_are_sorted_and_output_compact(self) -> None:
        assert (
            encode_json({"b": 1, "a": {"d": None, "c": True}}) == '{"a":{"c":true,"d":null},"b":1}'
        )

    def test_numbers_are_hashed_by_their_double_value(self) -> None:
        # PostgreSQL's jsonb may hand these back in another spelling; the encoding agrees.
        assert encode_json([1.0, 1, -0.0]) == "[1,1,0]"
        assert encode_json([1e21, 10**21]) == "[1e+21,1e+21]"
        assert encode_json([0.1, 2.5e-7]) == "[0.1,2.5e-07]"

    def test_strings_keep_unicode_and_escape_controls(self) -> None:
        assert encode_json('é\n"') == '"é\\n\\""'


class TestLink:
    def test_the_documented_recipe_reproduces_the_hash(self) -> None:
        body: dict[str, Any] = {
            "causes": [],
            "correlationid": None,
            "data": {"a": [1e21, "é"], "b": 1},
            "datacontenttype": None,
            "dataschema": None,
            "extensions": {},
            "id": "e-1",
            "modelname": None,
            "modelsig": None,
            "modelversion": None,
            "position": 1,
            "recordedtime": "2026-11-30T12:00:01.000005Z",
            "source": "/s",
            "stream": "/s",
            "streamversion": 1,
            "subject": None,
            "tenant": "acme",
            "time": "2026-11-30T12:00:00.123456789Z",
            "type": "t",
        }
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        expected = hashlib.sha256(bytes(32) + text.encode()).digest()
        assert link(GENESIS_HASH, RECORD) == expected

    def test_any_change_to_the_content_changes_the_hash(self) -> None:
        assert link(GENESIS_HASH, RECORD) != link(GENESIS_HASH, replace(RECORD, data={"b": 2}))
        assert link(GENESIS_HASH, RECORD) != link(b"\x01" * 32, RECORD)

    def test_binary_data_is_encoded_as_hex(self) -> None:
        record = replace(RECORD, data=None, data_binary=b"\x00\xff")
        assert b'"data_base64":"00ff"' in canonical_bytes(record)
