"""Each problem with an event names where it is: ``pointer`` is a JSON Pointer (RFC 6901)
into the body as sent. It said ``#/0/type`` for a structured event too, whose body has
no item 0 (the type is at ``#/type``), ``#/0/`` for a batch item that is no object, and
pointed into a JSON document in binary mode, where the attributes are headers."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from app.errors import AppError
from ingest.binding import BATCH, STRUCTURED, parse_request
from ingest.limits import Limits

LIMITS = Limits()
BASE = {"specversion": "1.0", "id": "1", "source": "/s", "type": "t"}


def members(content_type: str, body: bytes, headers: list[tuple[bytes, bytes]]) -> Any:
    with pytest.raises(AppError) as refused:
        parse_request(content_type, headers, body, LIMITS)
    return refused.value.extensions["errors"]


def test_a_structured_event_is_pointed_at_from_the_body_root() -> None:
    [member] = members(STRUCTURED, orjson.dumps({**BASE, "type": ""}), [])
    assert member["pointer"] == "#/type"
    assert member["attribute"] == "type"


def test_a_batch_item_is_pointed_at_by_its_index() -> None:
    body = orjson.dumps([BASE, {**BASE, "id": "2", "source": ""}, 7])
    found = members(BATCH, body, [])
    assert [m["pointer"] for m in found] == ["#/1/source", "#/2"]
    assert [m["index"] for m in found] == [1, 2]


def test_a_binary_event_names_the_attribute_and_points_into_no_document() -> None:
    headers = [(b"ce-specversion", b"1.0"), (b"ce-id", b"1"), (b"ce-source", b"/s")]
    [member] = members("application/json", b"{}", headers)  # no ce-type
    assert member["attribute"] == "type"
    assert "pointer" not in member


def test_a_member_name_with_a_slash_or_a_tilde_is_escaped() -> None:
    [member] = members(STRUCTURED, orjson.dumps({**BASE, "a/b~": 1}), [])
    assert member["pointer"] == "#/a~1b~0"


def test_attributes_over_their_limit_are_the_events_problem() -> None:
    """Not a member called "attributes" (which an extension may be: it was blamed)."""
    sent = {**BASE, "attributes": "small", "note": "x" * (LIMITS.max_attributes_bytes + 1)}
    [member] = members(BATCH, orjson.dumps([BASE, sent]), [])
    assert member["pointer"] == "#/1"
    assert member["attribute"] == ""
    [member] = members(STRUCTURED, orjson.dumps(sent), [])
    assert member["pointer"] == "#"


def test_data_over_its_limit_is_pointed_at_where_it_was_sent() -> None:
    big = b"y" * (LIMITS.max_event_data_bytes + 1)
    sent = {**BASE, "data_base64": base64.b64encode(big).decode()}
    [member] = members(BATCH, orjson.dumps([sent]), [])
    assert member["pointer"] == "#/0/data_base64"
    [member] = members(BATCH, orjson.dumps([{**BASE, "data": big.decode()}]), [])
    assert member["pointer"] == "#/0/data"
