"""A run that reads and writes one table (an incremental merge) names its input at START
and its output at COMPLETE, as docs/openlineage.md allows ("a client may name its inputs
at START alone"). Delivered in order, the run reads the table's version before it and
writes the next. Delivered COMPLETE first ("Out-of-order runs": "a run's datasets are
those of all its events in any order of arrival"), the late START reads the table's
*latest* version, which is the one this very run's COMPLETE just wrote: `dataset` said
the run read its own output, the version it did read had no reader, and an audit of a
model the run trained lost the data it read. A late event now reads the newest version
the run did not write."""

from __future__ import annotations

from typing import Any

import httpx2
import orjson

from tests.integration.events import JSON
from tests.integration.ingest.openlineage.audits import audit_of_a_decision
from tests.integration.ingest.openlineage.shapes import dataset, new_run, run_event

VERSIONS = """
query ($namespace: String!, $name: String!) {
  dataset(namespace: $namespace, name: $name) { versions { writtenByRunId readByRunIds } }
}
"""
TABLE = ("s3://lake", "accounts")


async def post(client: httpx2.AsyncClient, sent: dict[str, Any]) -> None:
    r = await client.post("/api/v1/lineage", content=orjson.dumps(sent), headers=JSON)
    assert r.status_code == 201, r.text


async def versions(client: httpx2.AsyncClient) -> Any:
    variables = {"namespace": TABLE[0], "name": TABLE[1]}
    body = (await client.post("/graphql", json={"query": VERSIONS, "variables": variables})).json()
    assert "errors" not in body, body
    return body["data"]["dataset"]["versions"]


async def merge(client: httpx2.AsyncClient, run: str, *, complete_first: bool) -> None:
    start = run_event("START", run, "merge", inputs=[dataset(*TABLE)])
    complete = run_event("COMPLETE", run, "merge", outputs=[dataset(*TABLE)])
    for sent in (complete, start) if complete_first else (start, complete):
        await post(client, sent)


async def test_in_order_the_merge_reads_the_version_before(client: httpx2.AsyncClient) -> None:
    first, merging = new_run(), new_run()
    await post(client, run_event("COMPLETE", first, "load", outputs=[dataset(*TABLE)]))
    await merge(client, merging, complete_first=False)
    assert await versions(client) == [
        {"writtenByRunId": first, "readByRunIds": [merging]},
        {"writtenByRunId": merging, "readByRunIds": []},
    ]


async def test_complete_first_the_merge_reads_the_version_before_too(
    client: httpx2.AsyncClient,
) -> None:
    first, merging = new_run(), new_run()
    await post(client, run_event("COMPLETE", first, "load", outputs=[dataset(*TABLE)]))
    await merge(client, merging, complete_first=True)
    assert await versions(client) == [
        {"writtenByRunId": first, "readByRunIds": [merging]},
        {"writtenByRunId": merging, "readByRunIds": []},
    ]


AUDIT = "query ($id: ID!) { audit(decisionId: $id) { datasets { writtenByRunId } } }"


async def test_complete_first_an_audit_still_reaches_the_data_the_run_read(
    client: httpx2.AsyncClient, admin: httpx2.AsyncClient
) -> None:
    first, merging = new_run(), new_run()
    await post(client, run_event("COMPLETE", first, "load", outputs=[dataset(*TABLE)]))
    await merge(client, merging, complete_first=True)
    found = (await audit_of_a_decision(client, admin, merging, AUDIT))["data"]["audit"]
    assert {"writtenByRunId": first} in found["datasets"], found
