"""The official CloudEvents Python SDK as a real client, in structured and binary mode."""

from __future__ import annotations

import json

import httpx2
from cloudevents.core.bindings.http import to_binary_event, to_structured_event
from cloudevents.core.v1.event import CloudEvent

from tests.integration.conftest import MakeKey
from tests.integration.events import causes_of


def prediction(**attributes: str) -> CloudEvent:
    return CloudEvent(
        attributes={"type": "com.acme.prediction.v1", "source": "/svc/scorer", **attributes},
        data={"score": 0.9},
    )


async def test_structured_mode_from_the_sdk(client: httpx2.AsyncClient) -> None:
    sent = prediction(subject="décision 1", correlationid="run-9")
    message = to_structured_event(sent)
    response = await client.post("/events", content=message.body, headers=message.headers)
    assert response.status_code == 201
    stored = (await client.get(f"/events/{sent.get_id()}")).json()
    assert stored["subject"] == "décision 1"
    assert stored["data"] == {"score": 0.9}
    assert stored["time"] == message_time(message.body)


async def test_binary_mode_from_the_sdk_keeps_lineage(client: httpx2.AsyncClient) -> None:
    cause = prediction()
    first = to_structured_event(cause)
    await client.post("/events", content=first.body, headers=first.headers)
    effect = CloudEvent(
        attributes={
            "type": "com.acme.decision.v1",
            "source": "/svc/decider",
            "subject": "Euro € 😀",
            "causationid": cause.get_id(),
            "datacontenttype": "application/json",
        },
        data={"approve": True},
    )
    message = to_binary_event(effect)
    response = await client.post("/events", content=message.body, headers=message.headers)
    assert response.status_code == 201, response.text
    stored = (await client.get(f"/events/{effect.get_id()}")).json()
    assert stored["subject"] == "Euro € 😀"
    assert causes_of(stored) == [cause.get_id()]
    assert stored["data"] == {"approve": True}


async def test_the_sdk_resending_is_idempotent(
    client: httpx2.AsyncClient, make_key: MakeKey
) -> None:
    message = to_binary_event(prediction())
    first = await client.post("/events", content=message.body, headers=message.headers)
    again = await client.post("/events", content=message.body, headers=message.headers)
    assert first.status_code == 201
    assert again.status_code == 200
    assert again.json()["events"][0]["position"] == first.json()["events"][0]["position"]


def message_time(body: bytes) -> str:
    return str(json.loads(body)["time"])
