"""CloudEvents 1.0's rules on both sides of the store: what it refuses on the way in
(spec.md's type system and required attributes), and that what it answers is CloudEvents
a consumer's SDK reads (GET /events/{id}, GET /streams/..., replay): every member is an
attribute named as the spec has it (lower-case letters and digits) with a value of a
CloudEvents type (no array). The store's own members once broke both rules
(``stream_version``, ``prev_hash``, ``causes``), and the official SDK refused the events."""

from __future__ import annotations

import re
from typing import Any

import httpx2
import orjson
import pytest
from cloudevents.core.bindings.http import HTTPMessage, from_http_event

from tests.integration.events import BATCH, STRUCTURED, causes_of, dumps, event

_NAME = re.compile(r"^[a-z0-9]+\Z")


async def _append(client: httpx2.AsyncClient, *events: dict[str, Any]) -> None:
    response = await client.post("/events", content=dumps(list(events)), headers=BATCH)
    assert response.status_code == 201, response.text


async def _read_back(client: httpx2.AsyncClient, path: str, event_id: str) -> dict[str, Any]:
    """The event ``event_id`` as the read path ``path`` gives it."""
    if path == "event":
        response = await client.get(f"/events/{event_id}")
    else:
        response = await client.get("/streams/s-1" if path == "stream" else "/replay")
    assert response.status_code == 200, response.text
    if path == "event":
        return dict(response.json())
    found = response.json() if path == "stream" else [
        orjson.loads(line) for line in response.content.split(b"\n") if line
    ]  # fmt: skip
    return next(item for item in found if item["id"] == event_id)


@pytest.mark.parametrize("path", ["event", "stream", "replay"])
async def test_what_is_read_back_is_attributes_named_and_typed_as_cloudevents_has_them(
    client: httpx2.AsyncClient, path: str
) -> None:
    await _append(client, event(id="c-1", stream="s-1"), event(id="c-2", stream="s-1"))
    await _append(client, event(id="e-1", stream="s-1", causationid="c-1, c-2"))
    stored = await _read_back(client, path, "e-1")
    attributes = {k: v for k, v in stored.items() if k not in ("data", "data_base64")}
    assert [name for name in attributes if not _NAME.match(name)] == []
    assert {k: v for k, v in attributes.items() if not isinstance(v, str | int | bool)} == {}
    assert (stored["streamversion"], causes_of(stored)) == (3, ["c-1", "c-2"])
    assert {"position", "storedtime", "prevhash", "hash"} <= stored.keys()


async def test_the_official_sdk_reads_a_stored_event(client: httpx2.AsyncClient) -> None:
    sent = event(id="sdk-1", subject="s")
    await _append(client, sent)
    response = await client.get("/events/sdk-1")
    assert response.status_code == 200, response.text
    read = from_http_event(HTTPMessage(dict(response.headers), response.content))
    assert (read.get_id(), read.get_data()) == ("sdk-1", sent["data"])
    assert read.get_extension("streamversion") == 1


async def test_a_producers_recorded_time_is_kept_as_sent(client: httpx2.AsyncClient) -> None:
    """The Recorded Time extension is the producer's: "Intermediaries MUST NOT change the
    value of the recordedtime attribute". The store's own time is ``storedtime``."""
    sent = event(id="rt-1", time="2024-05-01T10:00:00Z", recordedtime="2024-05-01T10:00:05Z")
    response = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
    assert response.status_code == 201, response.text
    stored = (await client.get("/events/rt-1")).json()
    assert stored["recordedtime"] == "2024-05-01T10:00:05Z"
    assert stored["storedtime"] != stored["recordedtime"]


async def test_a_leap_second_is_taken_and_read_back_as_sent(client: httpx2.AsyncClient) -> None:
    """CloudEvents' Timestamp is RFC 3339, which allows second 60: it was refused as an
    invalid CloudEvent. Kept as sent; a time filter takes it as the minute's last instant."""
    sent = event(id="leap-1", time="2016-12-31T23:59:60Z")
    response = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
    assert response.status_code == 201, response.text
    assert (await client.get("/events/leap-1")).json()["time"] == "2016-12-31T23:59:60Z"
    before = {"since": "2016-12-31T23:59:59Z", "until": "2017-01-01T00:00:00Z"}
    replayed = (await client.get("/replay", params=before)).text.splitlines()
    assert [orjson.loads(line)["id"] for line in replayed] == ["leap-1"]


@pytest.mark.parametrize("name", ["position", "streamversion", "storedtime", "prevhash", "hash"])
async def test_what_the_store_sets_cannot_be_sent(client: httpx2.AsyncClient, name: str) -> None:
    response = await client.post("/events", content=dumps(event(**{name: "x"})), headers=STRUCTURED)
    assert response.status_code == 400, response.text
    assert response.json()["errors"][0]["attribute"] == name


@pytest.mark.parametrize("batch", [False, True], ids=["structured", "batch"])
async def test_an_extension_nested_past_what_json_writers_take_is_a_400(
    client: httpx2.AsyncClient, batch: bool
) -> None:
    """An array or object is no attribute value (400); nested 300 deep, measuring the
    attributes' size raised, and the producer got a 500."""
    item = b'{"specversion":"1.0","id":"deep","source":"/s","type":"t","ext":'
    item += b"[" * 300 + b"]" * 300 + b"}"
    body, headers = (b"[" + item + b"]", BATCH) if batch else (item, STRUCTURED)
    response = await client.post("/events", content=body, headers=headers)
    assert response.status_code == 400, response.text
    assert response.json()["errors"][0]["attribute"] == "ext"


@pytest.mark.parametrize("character", ["\ufffe", "\ufdd0", "\U0010ffff", "\U0001ffff"])
@pytest.mark.parametrize("name", ["subject", "myext"])
async def test_a_unicode_noncharacter_in_an_attribute_is_refused(
    client: httpx2.AsyncClient, character: str, name: str
) -> None:
    """spec.md, String: "The following characters are disallowed: ... code points
    identified as noncharacters by Unicode." (Such a subject became a stream's name.)"""
    sent = event(**{name: f"a{character}b"})
    response = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
    assert response.status_code == 400, response.text
    assert "noncharacter" in response.json()["errors"][0]["detail"]


@pytest.mark.parametrize("source", ["my source", "/a<b>", '/a"b', "/a{b}", "/a|b", "/a\\b"])
async def test_a_source_that_is_no_uri_reference_is_refused(
    client: httpx2.AsyncClient, source: str
) -> None:
    """spec.md, source: "a non-empty URI-reference" (RFC 3986 leaves whitespace and
    ``<>"{}|\\^``` out of every URI). Such a source was stored, and named its stream."""
    response = await client.post("/events", content=dumps(event(source=source)), headers=STRUCTURED)
    assert response.status_code == 400, response.text
    assert response.json()["errors"][0]["attribute"] == "source"


@pytest.mark.parametrize(
    "source", ["/cameras/gate-1", "urn:uuid:1b4e28ba", "evs://cam?x=1#f", "/caf\u00e9"]
)
async def test_a_uri_reference_source_is_taken(client: httpx2.AsyncClient, source: str) -> None:
    response = await client.post("/events", content=dumps(event(source=source)), headers=STRUCTURED)
    assert response.status_code == 201, response.text
