"""The hash chain: the canonical encoding of a stored event and the SHA-256 link.

``hash(n) = SHA-256(hash(n-1) || canonical(event n))``, with 32 zero bytes before the
first event. ``docs/hash-chain.md`` specifies the encoding for auditors; this module is
the reference implementation and must stay in step with that page.

The encoding must survive a JSONB round trip, and PostgreSQL rewrites numbers (``1e16``
comes back as ``10000000000000000``, ``-0.0`` as ``0.0``). So ingest stores numbers in
a normal form (``ingest.attributes.normalise_numbers``: integral values as integers,
magnitudes within the I-JSON range) that reads back as the same Python value, and the
encoding is plain ``orjson`` with sorted keys: numbers as in RFC 8785.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import orjson

GENESIS_HASH = bytes(32)


@dataclass(frozen=True, slots=True)
class ChainRecord:
    """What the chain covers of one event: every stored attribute, nothing derived."""

    position: int
    tenant: str
    id: str
    source: str
    type: str
    subject: str | None
    time: str | None
    recorded_at: datetime
    stream: str
    stream_version: int
    datacontenttype: str | None
    dataschema: str | None
    has_data: bool
    data: Any
    data_binary: bytes | None
    extensions: Mapping[str, Any]
    causes: Sequence[str]
    correlation_id: str | None
    model_name: str | None
    model_version: str | None
    model_signature: str | None


def canonical_bytes(record: ChainRecord) -> bytes:
    """The canonical encoding of ``record``: compact JSON, keys sorted, UTF-8."""
    body: dict[str, Any] = {
        "causes": list(record.causes),
        "correlationid": record.correlation_id,
        "datacontenttype": record.datacontenttype,
        "dataschema": record.dataschema,
        "extensions": dict(record.extensions),
        "id": record.id,
        "modelname": record.model_name,
        "modelsig": record.model_signature,
        "modelversion": record.model_version,
        "position": record.position,
        "recordedtime": format_recorded_at(record.recorded_at),
        "source": record.source,
        "stream": record.stream,
        "streamversion": record.stream_version,
        "subject": record.subject,
        "tenant": record.tenant,
        "time": record.time,
        "type": record.type,
    }
    if record.data_binary is not None:
        body["data_base64"] = record.data_binary.hex()
    elif record.has_data:
        body["data"] = record.data
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def link(prev_hash: bytes, record: ChainRecord) -> bytes:
    return hashlib.sha256(prev_hash + canonical_bytes(record)).digest()


@lru_cache(maxsize=256)  # every event of a group shares one recorded_at
def format_recorded_at(value: datetime) -> str:
    """UTC, always six fractional digits and ``Z``: ``2026-11-30T13:19:11.000123Z``."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
