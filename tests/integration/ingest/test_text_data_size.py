"""CAUSEWAY_MAX_EVENT_DATA_BYTES measures text alike in every content mode, as the store's
duplicate check reads it: text of a type that is not JSON is its UTF-8 bytes, whether it
came as a JSON string (structured and batch mode) or as a body (binary mode). It was
measured as its JSON string (quotes and escapes counted), so 900 bytes of text taken in
binary mode were refused in structured mode, and a re-send of a stored event was refused
rather than a duplicate. Moved here from the review's tests/integration/zz_review_ingest."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from sqlalchemy import URL

from app.main import create_app, dispose
from app.settings import Settings
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import BATCH, STRUCTURED, dumps

TEXT = 'say "hi"\n' * 100  # 900 bytes of text; 1,202 as a JSON string
OVER = "é" * 501  # 501 characters, 1,002 bytes of UTF-8


@pytest.fixture
async def small_data(database_url: URL, make_key: MakeKey) -> AsyncIterator[httpx2.AsyncClient]:
    """A client of a service whose data limit is 1,000 bytes."""
    app = create_app(Settings(_env_file=None, max_event_data_bytes=1000), database_url=database_url)
    try:
        async with asgi_client(app, await make_key()) as client:
            yield client
    finally:
        await dispose(app)


def structured(event_id: str, media_type: str, **data: Any) -> dict[str, Any]:
    """An event in the JSON format, its data given as ``data`` or ``data_base64``."""
    return {
        "specversion": "1.0",
        "id": event_id,
        "source": "/s",
        "type": "t",
        "datacontenttype": media_type,
        **data,
    }


def binary_headers(event_id: str, media_type: str) -> dict[str, str]:
    return {
        "ce-specversion": "1.0",
        "ce-id": event_id,
        "ce-source": "/s",
        "ce-type": "t",
        "Content-Type": media_type,
    }


async def test_text_within_the_limit_is_taken_in_every_mode(
    small_data: httpx2.AsyncClient,
) -> None:
    """900 bytes of text/plain with quotes and newlines, within a 1,000-byte limit: its
    JSON string's escapes are not the data's bytes."""
    alone = structured("text-1", "text/plain", data=TEXT)
    response = await small_data.post("/events", content=dumps(alone), headers=STRUCTURED)
    assert response.status_code == 201, response.text
    batch = [structured("text-2", "text/plain", data=TEXT)]
    response = await small_data.post("/events", content=dumps(batch), headers=BATCH)
    assert response.status_code == 201, response.text
    response = await small_data.post(
        "/events", content=TEXT.encode(), headers=binary_headers("text-3", "text/plain")
    )
    assert response.status_code == 201, response.text


async def test_text_stored_in_binary_mode_re_sent_in_structured_mode_is_a_duplicate(
    small_data: httpx2.AsyncClient,
) -> None:
    """README: 'Sending the same event again answers 200 ... in any content mode (...
    text data is the same as a JSON string or as bytes ...)'."""
    headers = binary_headers("text-4", "text/plain")
    first = await small_data.post("/events", content=TEXT.encode(), headers=headers)
    assert first.status_code == 201, first.text
    again = structured("text-4", "text/plain", data=TEXT)
    for content, mode in ((dumps(again), STRUCTURED), (dumps([again]), BATCH)):
        response = await small_data.post("/events", content=content, headers=mode)
        assert response.status_code == 200, response.text
        assert response.json()["events"][0]["duplicate"] is True


async def test_text_over_the_limit_is_measured_in_utf8_bytes(
    small_data: httpx2.AsyncClient,
) -> None:
    """501 characters of two bytes each are 1,002 bytes, over the limit by 2, in
    structured mode as in binary mode."""
    sent = structured("text-5", "text/plain; charset=utf-8", data=OVER)
    response = await small_data.post("/events", content=dumps(sent), headers=STRUCTURED)
    assert response.status_code == 422, response.text
    assert response.json()["type"] == "/problems/event-too-large"
    assert "data takes 1002 bytes, over the 1000-byte limit by 2" in response.json()["detail"]
    response = await small_data.post(
        "/events",
        content=OVER.encode(),
        headers=binary_headers("text-6", "text/plain; charset=utf-8"),
    )
    assert response.status_code == 422, response.text
    assert "data takes 1002 bytes, over the 1000-byte limit by 2" in response.json()["detail"]


async def test_json_in_data_base64_is_measured_as_sent_for_it_is_stored_so(
    small_data: httpx2.AsyncClient,
) -> None:
    """``data_base64`` is stored as the bytes sent, JSON type or not: JSON padded with
    white space past the limit is refused, in a batch as alone, though ``{}`` is two bytes
    compact. Measured compact, a batch could store megabytes of it under a 1,000-byte
    limit."""
    padded = base64.b64encode(b"{" + b" " * 1000 + b"}").decode()
    sent = structured("json-1", "application/json", data_base64=padded)
    for content, mode in ((dumps(sent), STRUCTURED), (dumps([sent]), BATCH)):
        response = await small_data.post("/events", content=content, headers=mode)
        assert response.status_code == 422, response.text
        assert "data takes 1002 bytes, over the 1000-byte limit by 2" in response.text
