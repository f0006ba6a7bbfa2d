"""Builders for request bodies, shared by the integration tests."""

from __future__ import annotations

from itertools import count
from typing import Any

import orjson

from app.store.model_registry import Signature

STRUCTURED = {"Content-Type": "application/cloudevents+json"}
BATCH = {"Content-Type": "application/cloudevents-batch+json"}
JSON = {"Content-Type": "application/json"}
_ids = count(1)


def event(**attributes: Any) -> dict[str, Any]:
    """A structured CloudEvent with a fresh id; keyword arguments override or add members."""
    body: dict[str, Any] = {
        "specversion": "1.0",
        "id": f"evt-{next(_ids)}",
        "source": "/cameras/gate",
        "type": "com.example.frame.v1",
        "data": {"frame": 1},
    }
    body.update(attributes)
    return {k: v for k, v in body.items() if v is not ...}


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


SIGNATURE: dict[str, Any] = {
    "inputs": [{"name": "image", "type": "binary"}],
    "outputs": [
        {"name": "score", "type": "double"},
        {"name": "label", "type": "string", "required": False},
    ],
}


def digest_of(signature: dict[str, Any] = SIGNATURE) -> str:
    return Signature.model_validate(signature).digest()


def registration(version: str, signature: dict[str, Any] = SIGNATURE, **extra: Any) -> bytes:
    return dumps({"version": version, "signature": signature, **extra})


def causes_of(stored: dict[str, Any]) -> list[str]:
    """The cause ids of an event as the store reads it back: its ``causationid``, the ids
    joined by commas (no stored id holds one)."""
    text = stored.get("causationid")
    return text.split(",") if text else []
