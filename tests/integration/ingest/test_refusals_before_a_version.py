"""A batch whose first event is refused (an unknown cause, an unregistered model, an id
stored with other content) and whose next event expects the stream version the first
would have made: it was answered 409 version-conflict, 'stream is at version 1, not 2',
though the sender counted right; a sender following the usual loop (409: read the stream
again, retry) never learned what was wrong. The refusal is named (from a review)."""

from __future__ import annotations

import httpx2

from tests.integration.events import BATCH, STRUCTURED, dumps, event


async def test_an_unknown_cause_is_named_not_a_version_conflict(
    client: httpx2.AsyncClient,
) -> None:
    stored = await client.post("/events", content=dumps(event(stream="S")), headers=STRUCTURED)
    assert stored.status_code == 201
    batch = [
        event(id="a-1", stream="S", causationid="never-stored"),
        event(id="a-2", stream="S", expectedversion=2),  # right, after a-1
    ]
    response = await client.post("/events", content=dumps(batch), headers=BATCH)
    assert response.status_code == 422, response.text
    assert response.json()["type"] == "/problems/unknown-cause"


async def test_an_unregistered_model_is_named_not_a_version_conflict(
    client: httpx2.AsyncClient,
) -> None:
    batch = [
        event(id="m-1", stream="M", modelname="nobody", modelversion="1"),
        event(id="m-2", stream="M", expectedversion=1),
    ]
    response = await client.post("/events", content=dumps(batch), headers=BATCH)
    assert response.status_code == 422, response.text
    assert response.json()["type"] == "/problems/invalid-event"


async def test_an_id_stored_with_other_content_is_named_not_a_version_conflict(
    client: httpx2.AsyncClient,
) -> None:
    first = await client.post(
        "/events", content=dumps(event(id="i-1", stream="I", data={"n": 1})), headers=STRUCTURED
    )
    assert first.status_code == 201
    batch = [
        event(id="i-1", stream="J", data={"n": 2}),  # the id again, other content
        event(id="i-2", stream="J", expectedversion=1),
    ]
    response = await client.post("/events", content=dumps(batch), headers=BATCH)
    assert response.status_code == 409, response.text
    assert response.json()["type"] == "/problems/id-conflict"


async def test_a_wrong_version_is_still_a_version_conflict(client: httpx2.AsyncClient) -> None:
    batch = [event(id="v-1", stream="V"), event(id="v-2", stream="V", expectedversion=5)]
    response = await client.post("/events", content=dumps(batch), headers=BATCH)
    assert response.status_code == 409, response.text
    assert response.json()["type"] == "/problems/version-conflict"
