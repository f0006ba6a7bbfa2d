"""The hash chain: the canonical encoding of a stored event and the SHA-256 link.

``hash(n) = SHA-256(hash(n-1) || canonical(event n))``, with 32 zero bytes before the
first event. ``docs/hash-chain.md`` specifies the encoding for auditors; this module is
the reference implementation and must stay in step with that page.

The encoding must survive a JSONB round trip, and PostgreSQL rewrites numbers (``1e16``
comes back as ``10000000000000000``, ``-0.0`` as ``0.0``). So every event's numbers are
put in a normal form before it is hashed (``app.store.records.normalise_numbers``, by
ingest and again by the group planner, for events built in code: integral values as
integers, magnitudes within the I-JSON range) that reads back as the same Python value, and the
encoding is plain ``orjson`` with sorted keys: numbers as in RFC 8785, but a magnitude in
[1e-6, 1e-5) in exponent form (``1e-6``), where ECMAScript writes ``0.000001``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Protocol

import orjson

GENESIS_HASH = bytes(32)


class Content(Protocol):
    """An event's own attributes, as both a ``ChainRecord`` and an ``ingest``-built
    ``NewEvent`` hold them: what the chain covers besides where the store put it."""

    @property
    def id(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def subject(self) -> str | None: ...
    @property
    def time(self) -> str | None: ...
    @property
    def stream(self) -> str: ...
    @property
    def datacontenttype(self) -> str | None: ...
    @property
    def dataschema(self) -> str | None: ...
    @property
    def has_data(self) -> bool: ...
    @property
    def data(self) -> Any: ...
    @property
    def data_binary(self) -> bytes | None: ...
    @property
    def extensions(self) -> Mapping[str, Any]: ...
    @property
    def causes(self) -> Sequence[str]: ...
    @property
    def correlation_id(self) -> str | None: ...
    @property
    def model_name(self) -> str | None: ...
    @property
    def model_version(self) -> str | None: ...
    @property
    def model_signature(self) -> str | None: ...


# Not frozen: a frozen dataclass of this many fields takes three times as long to build,
# and one is built for every event read back for verification. Treat it as immutable.
@dataclass(slots=True)
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
    return encode(record, record.tenant, record.position, record.stream_version, record.recorded_at)


def encode(
    content: Content, tenant: str, position: int, stream_version: int, recorded_at: datetime
) -> bytes:
    """The canonical encoding of ``content`` stored at ``position``: what
    ``canonical_bytes`` gives for the record the store would keep, without building it."""
    extensions = content.extensions
    body: dict[str, Any] = {
        "causes": list(content.causes),
        "correlationid": content.correlation_id,
        "datacontenttype": content.datacontenttype,
        "dataschema": content.dataschema,
        "extensions": extensions if type(extensions) is dict else dict(extensions),
        "id": content.id,
        "modelname": content.model_name,
        "modelsig": content.model_signature,
        "modelversion": content.model_version,
        "position": position,
        "recordedtime": format_recorded_at(recorded_at),
        "source": content.source,
        "stream": content.stream,
        "streamversion": stream_version,
        "subject": content.subject,
        "tenant": tenant,
        "time": content.time,
        "type": content.type,
    }
    if content.data_binary is not None:
        body["data_base64"] = content.data_binary.hex()
    elif content.has_data:
        body["data"] = content.data
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def link(prev_hash: bytes, record: ChainRecord) -> bytes:
    return hashlib.sha256(prev_hash + canonical_bytes(record)).digest()


def seals(stored_hash: bytes, prev_hash: bytes, record: ChainRecord) -> bool:
    """Whether ``stored_hash`` is the link of ``record`` to ``prev_hash``. Content that has
    no canonical encoding (data nested past what orjson encodes, extensions that are no
    JSON object: written past the store) was never hashed by it: no stored hash seals it.
    (An array of pairs would encode as the object it lists, yet readers serve an array.)"""
    extensions: object = record.extensions  # typed a mapping; read back, any JSON
    if not isinstance(extensions, Mapping):
        return False
    try:
        return link(prev_hash, record) == stored_hash
    except (orjson.JSONEncodeError, TypeError, ValueError):
        return False


@lru_cache(maxsize=256)  # every event of a group shares one recorded_at
def format_recorded_at(value: datetime) -> str:
    """UTC, always six fractional digits and ``Z``: ``2026-11-30T13:19:11.000123Z``."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
