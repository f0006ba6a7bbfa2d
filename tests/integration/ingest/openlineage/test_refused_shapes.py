"""Events the spec's schema takes that Causeway cannot store as they are: each a 422
naming why, never a 500 (docs/openlineage.md, "What the log cannot keep")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2
import orjson
import pytest
from fastapi import FastAPI

from tests.integration.conftest import MakeKey
from tests.integration.ingest.openlineage.shapes import SPEC, dataset, facet, new_run, run_event

JSON = {"Content-Type": "application/json"}


@pytest.fixture
async def server_client(app: FastAPI, make_key: MakeKey) -> AsyncIterator[httpx2.AsyncClient]:
    """As a real server answers: an unhandled error is a 500, not raised into the test."""
    key = await make_key("acme", "ingest,read")
    async with httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app, raise_app_exceptions=False),
        base_url="http://causeway",
        headers={"Authorization": f"Bearer {key}"},
    ) as client:
        yield client


async def post(client: httpx2.AsyncClient, event: dict[str, Any] | bytes) -> httpx2.Response:
    body = event if isinstance(event, bytes) else orjson.dumps(event)
    return await client.post("/api/v1/lineage", content=body, headers=JSON)


def _nested(levels: int) -> bytes:
    """A run event with a custom facet nested ``levels`` deep."""
    event = run_event("START", new_run(), "deep", custom=facet("Custom", x=0))
    deep = '{"a":' * levels + "1" + "}" * levels
    return orjson.dumps(event).decode().replace('"x":0', f'"x":{deep}').encode()


# Past orjson's 254 levels, hashing the event (its id) failed before its depth was
# checked: a 500. Within them, the depth check answered. Past about 900, the schema's
# error message (the event's repr) overflowed the stack before it: a 500 again.
@pytest.mark.parametrize("levels", [200, 300, 1000])
async def test_a_facet_nested_too_deep_is_a_422(
    server_client: httpx2.AsyncClient, levels: int
) -> None:
    response = await post(server_client, _nested(levels))
    assert response.status_code == 422, (response.status_code, response.text[:300])
    assert "nests arrays and objects more than 128 levels deep" in response.json()["detail"]


async def test_a_dataset_event_with_a_member_named_inputs_is_stored(
    server_client: httpx2.AsyncClient,
) -> None:
    """A DatasetEvent's schema names no ``inputs`` and takes other members: ``inputs: [1]``
    is valid there, and was read as a run's inputs (a 500)."""
    event = {
        "eventTime": "2026-11-02T10:00:00Z",
        "producer": "https://example.com/producer",
        "schemaURL": f"{SPEC}#/$defs/DatasetEvent",
        "dataset": {"namespace": "s3://lake", "name": "static"},
        "inputs": [1],
    }
    response = await post(server_client, event)
    assert response.status_code == 201, (response.status_code, response.text[:300])
    [stored] = response.json()["events"]
    read = (await server_client.get(f"/events/{stored['id']}")).json()
    assert read["type"] == "io.openlineage.dataset.event"


# POST /events refuses an empty source or subject (CloudEvents: non-empty when present);
# the same log took them from an OpenLineage event's producer and job name.
@pytest.mark.parametrize(
    ("producer", "job", "pointer"),
    [("", "job", "#/producer"), ("https://example.com/p", "", "#/job/name")],
    ids=["producer", "job-name"],
)
async def test_an_empty_producer_or_job_name_is_refused(
    server_client: httpx2.AsyncClient, producer: str, job: str, pointer: str
) -> None:
    event = run_event("START", new_run(), job, producer=producer)
    response = await post(server_client, event)
    assert response.status_code == 422, (response.status_code, response.text[:300])
    problem = response.json()
    assert problem["type"].endswith("invalid-openlineage-event"), problem
    assert [e["pointer"] for e in problem["errors"]] == [pointer]


# An input's or output's name is the subject of its dataset version: an empty one was
# stored, an event POST /events itself would refuse.
@pytest.mark.parametrize("side", ["inputs", "outputs"])
async def test_an_empty_input_or_output_name_is_refused(
    server_client: httpx2.AsyncClient, side: str
) -> None:
    named = [dataset("s3://lake", "kept"), dataset("s3://lake", "")]
    event = run_event("COMPLETE", new_run(), "job")
    event[side] = named
    response = await post(server_client, event)
    assert response.status_code == 422, (response.status_code, response.text[:300])
    assert [e["pointer"] for e in response.json()["errors"]] == [f"#/{side}/1/name"]
