"""A run event that arrives after its run's COMPLETE (docs/openlineage.md, "Out-of-order
runs": both are stored) reads and writes the datasets it names first, as the COMPLETE
would have: "A run's inputs and outputs are those of all its events". A START that named
the run's inputs and outputs and landed second made no version of them and linked the run
to none, so the audit of a model that run trained showed no training data, for good."""

from __future__ import annotations

from typing import Any

import httpx2
import orjson

from tests.integration.events import JSON
from tests.integration.ingest.openlineage.audits import audit_of_a_decision
from tests.integration.ingest.openlineage.shapes import dataset, new_run, run_event

VERSIONS = """
query ($namespace: String!, $name: String!) {
  dataset(namespace: $namespace, name: $name) { versions { external writtenByRunId readByRunIds } }
}
"""
AUDIT = """
query ($id: ID!) { audit(decisionId: $id) { datasets { name } trainingRuns { run { state } } } }
"""


async def post(client: httpx2.AsyncClient, event: dict[str, Any]) -> httpx2.Response:
    return await client.post("/api/v1/lineage", content=orjson.dumps(event), headers=JSON)


async def versions_of(client: httpx2.AsyncClient, namespace: str, name: str) -> Any:
    variables = {"namespace": namespace, "name": name}
    body = (await client.post("/graphql", json={"query": VERSIONS, "variables": variables})).json()
    assert "errors" not in body, body
    found = body["data"]["dataset"]
    return None if found is None else found["versions"]


async def test_a_late_start_reads_and_writes_what_it_names(client: httpx2.AsyncClient) -> None:
    run = new_run()
    done = await post(client, run_event("COMPLETE", run, "etl", time="2026-11-02T10:05:00Z"))
    assert done.status_code == 201, done.text
    raw, clean = dataset("s3://late", "raw"), dataset("s3://late", "clean")
    start = run_event("START", run, "etl", inputs=[raw], outputs=[clean])
    answer = await post(client, start)
    assert answer.status_code == 201, answer.text
    read = await versions_of(client, "s3://late", "raw")
    assert read == [{"external": True, "writtenByRunId": None, "readByRunIds": [run]}]
    written = await versions_of(client, "s3://late", "clean")
    assert written == [{"external": False, "writtenByRunId": run, "readByRunIds": []}]
    again = await post(client, start)  # a retry: the same answer, nothing more written
    assert again.status_code == 200, again.text
    where = [(e["id"], e["position"]) for e in orjson.loads(answer.content)["events"]]
    assert [(e["id"], e["position"]) for e in orjson.loads(again.content)["events"]] == where
    assert len(where) == 3  # the input's first version, the START, the output's version
    assert len(await versions_of(client, "s3://late", "clean")) == 1


async def test_a_late_event_writes_nothing_the_run_named_before(
    client: httpx2.AsyncClient,
) -> None:
    run = new_run()
    out = dataset("s3://late", "once")
    done = run_event("COMPLETE", run, "etl", outputs=[out], time="2026-11-02T10:05:00Z")
    assert (await post(client, done)).status_code == 201
    assert (await post(client, run_event("START", run, "etl", outputs=[out]))).status_code == 201
    assert len(await versions_of(client, "s3://late", "once")) == 1


async def test_an_audit_names_the_training_data_of_a_run_whose_start_came_late(
    client: httpx2.AsyncClient, admin: httpx2.AsyncClient
) -> None:
    train = new_run()
    features = dataset("s3://lake", "features_late")
    await post(client, run_event("COMPLETE", train, "train", time="2026-11-02T10:05:00Z"))
    await post(client, run_event("START", train, "train", inputs=[features]))
    found = (await audit_of_a_decision(client, admin, train, AUDIT))["data"]["audit"]
    assert found["trainingRuns"] == [{"run": {"state": "COMPLETE"}}]
    assert found["datasets"] == [{"name": "features_late"}], found
