"""The canonical encoding behind the hash chain: stable, and blind to JSONB's rewrites."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import UTC, datetime

from app.store.chain import GENESIS_HASH, ChainRecord, canonical_bytes, link

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
    data={"b": 1, "a": [1.5e-7, "é\n"], "c": 0.1},
    data_binary=None,
    extensions={},
    causes=(),
    correlation_id=None,
    model_name=None,
    model_version=None,
    model_signature=None,
)


class TestLink:
    def test_the_encoding_is_the_documented_one(self) -> None:
        text = (
            '{"causes":[],"correlationid":null,"data":{"a":[1.5e-7,"é\\n"],"b":1,"c":0.1},'
            '"datacontenttype":null,"dataschema":null,"extensions":{},"id":"e-1",'
            '"modelname":null,"modelsig":null,"modelversion":null,"position":1,'
            '"recordedtime":"2026-11-30T12:00:01.000005Z","source":"/s","stream":"/s",'
            '"streamversion":1,"subject":null,"tenant":"acme",'
            '"time":"2026-11-30T12:00:00.123456789Z","type":"t"}'
        )
        assert canonical_bytes(RECORD) == text.encode()
        expected = hashlib.sha256(bytes(32) + text.encode()).digest()
        assert link(GENESIS_HASH, RECORD) == expected

    def test_any_change_to_the_content_changes_the_hash(self) -> None:
        assert link(GENESIS_HASH, RECORD) != link(GENESIS_HASH, replace(RECORD, data={"b": 2}))
        assert link(GENESIS_HASH, RECORD) != link(b"\x01" * 32, RECORD)

    def test_binary_data_is_encoded_as_hex(self) -> None:
        record = replace(RECORD, data=None, data_binary=b"\x00\xff")
        assert b'"data_base64":"00ff"' in canonical_bytes(record)
