"""Runs that race: each one's events stay in order on its own stream (test_router.py),
and an input that several name first at once gets one version, not one each."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import orjson

from tests.integration.events import JSON
from tests.integration.ingest.openlineage.shapes import dataset, new_run, run_event

VERSIONS = """
query ($namespace: String!, $name: String!) {
  dataset(namespace: $namespace, name: $name) { versions { external } }
}
"""


async def post(client: httpx2.AsyncClient, sent: dict[str, Any]) -> httpx2.Response:
    return await client.post("/api/v1/lineage", content=orjson.dumps(sent), headers=JSON)


# docs/openlineage.md: an input the log has no version of yet gets one of its own. Runs
# are locked by their own stream: those that raced each saw none, and each wrote one.
async def test_runs_that_first_name_one_input_at_once_make_one_version_of_it(
    client: httpx2.AsyncClient,
) -> None:
    source = dataset("pg://db", "raced")
    sent = [run_event("START", new_run(), f"job-{i}", inputs=[source]) for i in range(8)]
    answers = await asyncio.gather(*(post(client, e) for e in sent))
    assert [a.status_code for a in answers] == [201] * 8
    variables = {"namespace": "pg://db", "name": "raced"}
    body = (await client.post("/graphql", json={"query": VERSIONS, "variables": variables})).json()
    assert body["data"]["dataset"]["versions"] == [{"external": True}], body
