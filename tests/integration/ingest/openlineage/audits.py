"""An audit that reaches a training run: a model version registered as trained by it, an
event by that model, and a decision caused by the event."""

from __future__ import annotations

from typing import Any

import httpx2

from tests.integration.events import JSON, STRUCTURED, dumps, event, registration


async def audit_of_a_decision(
    client: httpx2.AsyncClient, admin: httpx2.AsyncClient, training_run: str, query: str
) -> dict[str, Any]:
    """The whole answer to ``query`` (taking ``$id``) for a decision by a model that
    ``training_run`` trained (model ``m``, version ``1``, registered by ``admin``)."""
    registered = await admin.post(
        "/models/m/versions", content=registration("1", training_run=training_run), headers=JSON
    )
    assert registered.status_code == 201, registered.text
    used = event(modelname="m", modelversion="1")
    decision = event(causationid=used["id"])
    for sent in (used, decision):
        posted = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        assert posted.status_code == 201, posted.text
    variables = {"id": decision["id"]}
    answer = await client.post("/graphql", json={"query": query, "variables": variables})
    found: dict[str, Any] = answer.json()
    return found
