"""The hash chain: the canonical encoding of a stored event and the SHA-256 link.

``hash(n) = SHA-256(hash(n-1) || canonical(event n))``, with 32 zero bytes before the
first event. ``docs/hash-chain.md`` specifies the encoding for auditors; this module is
the reference implementation and must stay in step with that page.

The encoding survives a JSONB round trip: PostgreSQL may rewrite a number (``1e21``
comes back as ``1000000000000000000000``, ``1.0`` as ``1.0`` or ``1``), so every number
is hashed through its IEEE double value. Key order is fixed by sorting.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

GENESIS_HASH = bytes(32)
_INT_EXACT = 2**53


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
    """The canonical encoding of ``record``: a sorted, compact JSON object in UTF-8."""
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
    return encode_json(body).encode()


def link(prev_hash: bytes, record: ChainRecord) -> bytes:
    return hashlib.sha256(prev_hash + canonical_bytes(record)).digest()


def format_recorded_at(value: datetime) -> str:
    """UTC, always six fractional digits and ``Z``: ``2026-11-30T13:19:11.000123Z``."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def encode_json(value: Any) -> str:
    """Compact JSON with sorted keys, unescaped UTF-8 and numbers as doubles.

    A number whose double value is integral and below 2**53 in size is written as an
    integer, any other as the shortest round-trip form of the double (Python's ``repr``).
    """
    return json.dumps(
        _normalise(value),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def _normalise(value: Any) -> Any:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        number = float(value)
        if number.is_integer() and abs(number) < _INT_EXACT:
            return int(number)
        return number
    if isinstance(value, Mapping):
        return {str(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    raise TypeError(f"cannot encode {type(value).__name__} canonically")
