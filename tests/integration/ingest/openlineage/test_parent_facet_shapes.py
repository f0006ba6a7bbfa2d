"""A parent facet of another shape (no run, or a run without runId) is accepted and
stored, as docs/openlineage.md promises, and names no parent: the GraphQL reads of its
run (``dataset``, and the ``audit`` of a decision the run trained the model of) answer,
where they failed whole with INTERNAL."""

from __future__ import annotations

from typing import Any

import httpx2
import orjson
import pytest

from tests.integration.events import STRUCTURED, dumps, event, registration
from tests.integration.ingest.openlineage.shapes import dataset, facet, new_run, run_event

JSON = {"Content-Type": "application/json"}

DATASET = """
query ($namespace: String!, $name: String!) {
  dataset(namespace: $namespace, name: $name) { name runs { runId parentRunId } }
}
"""


async def post(client: httpx2.AsyncClient, event: dict[str, Any]) -> httpx2.Response:
    return await client.post("/api/v1/lineage", content=orjson.dumps(event), headers=JSON)


@pytest.mark.parametrize(
    "parent",
    [
        {},  # a parent facet naming only the job
        {"run": "not-an-object"},
        {"run": {}},
    ],
    ids=["no-run", "run-is-a-string", "run-without-runId"],
)
async def test_dataset_query_survives_a_parent_facet_of_another_shape(
    client: httpx2.AsyncClient, parent: dict[str, Any]
) -> None:
    run = new_run()
    event = run_event("COMPLETE", run, "child", outputs=[dataset("s3://lake", "out")])
    job = {"namespace": "airflow", "name": "dag"}
    event["run"]["facets"]["parent"] = facet("ParentRunFacet", job=job, **parent)
    response = await post(client, event)
    assert response.status_code == 201, response.text
    answer = await client.post(
        "/graphql", json={"query": DATASET, "variables": {"namespace": "s3://lake", "name": "out"}}
    )
    body = answer.json()
    assert "errors" not in body, body
    assert body["data"]["dataset"]["runs"] == [{"runId": run, "parentRunId": None}]


async def test_parent_with_empty_runid_is_no_parent_in_graphql(client: httpx2.AsyncClient) -> None:
    """mapping.py: a parent whose runId is the empty string names no parent run."""
    run = new_run()
    event = run_event("COMPLETE", run, "child", outputs=[dataset("s3://lake", "out2")])
    event["run"]["facets"]["parent"] = facet(
        "ParentRunFacet", job={"namespace": "a", "name": "d"}, run={"runId": ""}
    )
    assert (await post(client, event)).status_code == 201
    answer = await client.post(
        "/graphql", json={"query": DATASET, "variables": {"namespace": "s3://lake", "name": "out2"}}
    )
    body = answer.json()
    assert "errors" not in body, body
    assert body["data"]["dataset"]["runs"] == [{"runId": run, "parentRunId": None}]


AUDIT = """
query ($id: ID!) {
  audit(decisionId: $id) { models { name } trainingRuns { run { runId } } chainVerified }
}
"""


async def test_audit_survives_a_training_run_with_a_parent_facet_of_another_shape(
    client: httpx2.AsyncClient, admin: httpx2.AsyncClient
) -> None:
    """One malformed (but accepted) parent facet on the training run makes the whole
    audit of a decision fail with INTERNAL."""
    run = new_run()
    complete = run_event("COMPLETE", run, "train", inputs=[dataset("s3://lake", "training")])
    complete["run"]["facets"]["parent"] = facet(
        "ParentRunFacet", job={"namespace": "airflow", "name": "dag"}
    )
    assert (await post(client, complete)).status_code == 201
    body = registration("1", training_run=run)
    registered = await admin.post("/models/m/versions", content=body, headers=JSON)
    assert registered.status_code == 201, registered.text
    used = event(modelname="m", modelversion="1")
    decision = event(causationid=used["id"])
    for sent in (used, decision):
        stored = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        assert stored.status_code == 201, stored.text
    answer = await client.post(
        "/graphql", json={"query": AUDIT, "variables": {"id": decision["id"]}}
    )
    result = answer.json()
    assert "errors" not in result, result
    assert result["data"]["audit"]["trainingRuns"] == [{"run": {"runId": run}}]
