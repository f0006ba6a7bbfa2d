"""What the relay sends for an event: the CloudEvents NATS protocol binding.

Structured mode (the default; the only mode of the released binding, v1.0.2): the
payload is the event as ``application/cloudevents+json``, byte for byte what
``GET /events/{id}`` answers (with ``position``, ``stream``, ``streamversion``, ``hash``
and the other store attributes), and ``Content-Type: application/cloudevents+json``
says so. Binary mode (the binding's working draft, 1.0.3-wip): every attribute is a
``ce-<name>`` header and the payload is the data alone; there is no ``Content-Type``
header (its absence is how a receiver tells the modes apart), the data's type goes in
``ce-datacontenttype``. Header values are percent-encoded as that draft says: space,
``"``, ``%`` and every byte outside ``!``..``~``. Integers and booleans are their JSON
text.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

import orjson

STRUCTURED_TYPE = "application/cloudevents+json"
Mode = Literal["structured", "binary"]
_PLAIN = frozenset(range(0x21, 0x7F)) - {ord(c) for c in '"%'}


def headers_and_payload(document: bytes, mode: Mode) -> tuple[dict[str, str], bytes]:
    """The binding's headers and payload for one event, given as its structured JSON."""
    if mode == "structured":
        return {"Content-Type": STRUCTURED_TYPE}, document
    event: dict[str, Any] = orjson.loads(document)
    data_base64 = event.pop("data_base64", None)
    has_data = "data" in event
    data = event.pop("data", None)
    headers = {f"ce-{name}": encode_header_value(_text(value)) for name, value in event.items()}
    if data_base64 is not None:
        return headers, base64.b64decode(data_base64)
    if not has_data:
        return headers, b""
    if isinstance(data, str) and not _is_json(event.get("datacontenttype")):
        return headers, data.encode()
    return headers, orjson.dumps(data)


def encode_header_value(value: str) -> str:
    return "".join(chr(b) if b in _PLAIN else f"%{b:02X}" for b in value.encode())


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _is_json(content_type: str | None) -> bool:
    """As CloudEvents decides whether ``data`` is JSON: no type, or a JSON media type."""
    if content_type is None:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media in {"application/json", "text/json"} or media.endswith("+json")


def hash_of(headers: dict[str, str], payload: bytes) -> bytes | None:
    """The stored event's hash a message carries: its ``ce-hash`` header (binary mode) or
    its document's ``hash`` (structured); None when it carries none that reads."""
    text = headers.get("ce-hash")
    if text is None:
        try:
            document = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return None
        text = document.get("hash") if isinstance(document, dict) else None
    try:
        return bytes.fromhex(text) if isinstance(text, str) else None
    except ValueError:
        return None


class EventTooLarge(Exception):
    """An event's message is over the server's ``max_payload``: the relay cannot pass it
    and will not skip it (every event, in order), so it says so until the limit is raised."""


def check_size(position: int, payload: bytes, headers: dict[str, str], max_payload: int) -> None:
    """Refuse (``EventTooLarge``) a message over the server's ``max_payload``."""
    # As HPUB sends them: "NATS/1.0\r\n", "key: value\r\n" each, "\r\n", the payload.
    lines = sum(len(k.encode()) + len(v.encode()) + 4 for k, v in headers.items())
    size = len(payload) + lines + 12
    if size > max_payload:
        raise EventTooLarge(
            f"the event at position {position} makes a message of about {size} bytes, over "
            f"the NATS server's max_payload ({max_payload}); raise max_payload in the "
            "server's configuration (docs/relay.md)"
        )
