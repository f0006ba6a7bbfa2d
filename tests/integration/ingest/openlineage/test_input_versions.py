"""A run that names the version of an input it read (the ``version`` dataset facet: an
Iceberg snapshot, a Delta version) is linked to that version when the log has it, not to
the dataset's latest: an audit names the training data the run says it read."""

from __future__ import annotations

from typing import Any

import httpx2
import orjson

from tests.integration.events import JSON
from tests.integration.ingest.openlineage.audits import audit_of_a_decision
from tests.integration.ingest.openlineage.shapes import dataset, facet, new_run, run_event

AUDIT = """
query ($id: ID!) { audit(decisionId: $id) { datasets { name version writtenByRunId } } }
"""


def features(version: str | None) -> dict[str, Any]:
    if version is None:
        return dataset("s3://lake", "features")
    named = facet("DatasetVersionDatasetFacet", datasetVersion=version)
    return dataset("s3://lake", "features", version=named)


async def post(client: httpx2.AsyncClient, sent: dict[str, Any]) -> None:
    response = await client.post("/api/v1/lineage", content=orjson.dumps(sent), headers=JSON)
    assert response.status_code == 201, response.text


async def audited(client: httpx2.AsyncClient, admin: httpx2.AsyncClient, run: str) -> Any:
    """The datasets the audit of a decision by a model that ``run`` trained names."""
    return (await audit_of_a_decision(client, admin, run, AUDIT))["data"]["audit"]["datasets"]


# The feature job writes v2 while the training run still reads v1: the run was linked to
# v2, written by the other run.
async def test_a_run_is_linked_to_the_version_of_an_input_it_names(
    client: httpx2.AsyncClient, admin: httpx2.AsyncClient
) -> None:
    first, second, train = new_run(), new_run(), new_run()
    await post(client, run_event("COMPLETE", first, "extract", outputs=[features("v1")]))
    await post(client, run_event("START", train, "train", inputs=[features("v1")]))
    await post(client, run_event("COMPLETE", second, "extract", outputs=[features("v2")]))
    await post(client, run_event("COMPLETE", train, "train", inputs=[features("v1")]))
    datasets = await audited(client, admin, train)
    assert datasets == [{"name": "features", "version": "v1", "writtenByRunId": first}]


async def test_a_version_the_log_has_not_is_the_latest_one(
    client: httpx2.AsyncClient, admin: httpx2.AsyncClient
) -> None:
    first, train = new_run(), new_run()
    await post(client, run_event("COMPLETE", first, "extract", outputs=[features("v1")]))
    await post(client, run_event("COMPLETE", train, "train", inputs=[features("v0")]))
    datasets = await audited(client, admin, train)
    assert datasets == [{"name": "features", "version": "v1", "writtenByRunId": first}]


VERSIONS = """
query ($namespace: String!, $name: String!) {
  dataset(namespace: $namespace, name: $name) { versions { external readByRunIds writtenByRunId } }
}
"""


async def versions_of(client: httpx2.AsyncClient, name: str) -> Any:
    variables = {"namespace": "s3://lake", "name": name}
    answer = await client.post("/graphql", json={"query": VERSIONS, "variables": variables})
    return answer.json()["data"]["dataset"]["versions"]


# OpenLineage accumulates a run's inputs and outputs over its events; only a COMPLETE's
# own were read, so a client that named its inputs at START alone read nothing.
async def test_datasets_named_before_the_complete_are_the_runs_too(
    client: httpx2.AsyncClient,
) -> None:
    run = new_run()
    named = [dataset("s3://lake", "raw")], [dataset("s3://lake", "clean")]
    await post(client, run_event("START", run, "etl", inputs=named[0], outputs=named[1]))
    complete = run_event("COMPLETE", run, "etl")
    first = await client.post("/api/v1/lineage", content=orjson.dumps(complete), headers=JSON)
    assert first.status_code == 201, first.text
    assert await versions_of(client, "raw") == [
        {"external": True, "readByRunIds": [run], "writtenByRunId": None}
    ]
    assert await versions_of(client, "clean") == [
        {"external": False, "readByRunIds": [], "writtenByRunId": run}
    ]
    again = await client.post("/api/v1/lineage", content=orjson.dumps(complete), headers=JSON)
    assert again.status_code == 200, again.text
    assert [e["id"] for e in again.json()["events"]] == [e["id"] for e in first.json()["events"]]
