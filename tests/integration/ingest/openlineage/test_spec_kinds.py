"""Events the spec's schema takes though their members name another kind: the route
takes them too (docs/openlineage.md: a 422 only when "the spec's schema refuses it"). It
held each to the branch its members named, and refused it."""

from __future__ import annotations

from typing import Any

import httpx2
import orjson

from tests.integration.ingest.openlineage.shapes import AIRFLOW, SPEC

JSON = {"Content-Type": "application/json"}


async def post(client: httpx2.AsyncClient, event: dict[str, Any]) -> httpx2.Response:
    return await client.post("/api/v1/lineage", content=orjson.dumps(event), headers=JSON)


async def test_a_dataset_event_with_a_run_member_is_a_dataset_event(
    client: httpx2.AsyncClient,
) -> None:
    """The spec's DatasetEvent forbids only `job` and `run` together; a RunEvent needs
    both: this is a DatasetEvent (it was held to RunEvent, having `run`)."""
    event = {
        "eventTime": "2026-11-02T10:00:00Z",
        "producer": AIRFLOW,
        "schemaURL": f"{SPEC}#/$defs/DatasetEvent",
        "dataset": {"namespace": "s3://lake", "name": "orders"},
        "run": {"note": "kept as sent"},
    }
    answer = await post(client, event)
    assert answer.status_code == 201, answer.text
    [stored] = answer.json()["events"]
    assert stored["stream"] == "openlineage:dataset:s3%3A//lake:orders"


async def test_a_job_event_with_a_dataset_member_of_its_own_is_a_job_event(
    client: httpx2.AsyncClient,
) -> None:
    """A JobEvent takes members the spec does not name; `"dataset": "x"` is no dataset,
    so this is a JobEvent (it was held to DatasetEvent, having `dataset`)."""
    event = {
        "eventTime": "2026-11-02T10:00:00Z",
        "producer": AIRFLOW,
        "schemaURL": f"{SPEC}#/$defs/JobEvent",
        "job": {"namespace": "airflow", "name": "etl"},
        "dataset": "x",
    }
    answer = await post(client, event)
    assert answer.status_code == 201, answer.text
    [stored] = answer.json()["events"]
    assert stored["stream"] == "openlineage:job:airflow:etl"
