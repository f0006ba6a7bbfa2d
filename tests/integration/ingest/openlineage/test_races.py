"""Runs that race: each one's events stay in order on its own stream (test_router.py),
an input that several name first at once gets one version, not one each, a COMPLETE
merges the event it follows, and a DatasetEvent is stored beside the versions runs
write."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import orjson
import pytest
from fastapi import FastAPI

import ingest.openlineage.router as router_module
from app.store.keys import Principal
from app.store.openlineage import fetch_all_stored
from ingest.limits import Limits
from ingest.openlineage.router import LineageIngest
from tests.integration.events import JSON
from tests.integration.ingest.openlineage.shapes import (
    SPARK,
    SPEC,
    dataset,
    new_run,
    run_event,
    schema,
)

VERSIONS = """
query ($namespace: String!, $name: String!) {
  dataset(namespace: $namespace, name: $name) { versions { external writtenByRunId } }
}
"""


async def versions_of(client: httpx2.AsyncClient, namespace: str, name: str) -> Any:
    variables = {"namespace": namespace, "name": name}
    body = (await client.post("/graphql", json={"query": VERSIONS, "variables": variables})).json()
    assert "errors" not in body, body
    found = body["data"]["dataset"]
    return None if found is None else found["versions"]


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
    versions = await versions_of(client, "pg://db", "raced")
    assert versions == [{"external": True, "writtenByRunId": None}], versions


# docs/openlineage.md, the answers: "409 version-conflict | only when other processes'
# events of the same run kept it moving for over a second". A DatasetEvent is appended
# expecting its dataset's stream as read, while the output versions of COMPLETEs land on
# that stream with no expectation (and under no lock it takes): in one process, a
# DatasetEvent about a dataset that runs keep writing is refused 409, time after time.
async def test_a_dataset_event_about_a_busy_dataset_is_stored(
    client: httpx2.AsyncClient,
) -> None:
    out = dataset("s3://lake", "busy")
    stop = asyncio.Event()

    async def writer() -> None:
        while not stop.is_set():
            sent = run_event("COMPLETE", new_run(), "writer", outputs=[out])
            answer = await post(client, sent)
            assert answer.status_code == 201, answer.text

    writers = [asyncio.create_task(writer()) for _ in range(8)]
    try:
        await asyncio.sleep(0.2)
        statuses = []
        for second in range(3):
            metadata = {
                "eventTime": f"2026-11-02T09:00:0{second}Z",
                "producer": SPARK,
                "schemaURL": f"{SPEC}#/$defs/DatasetEvent",
                "dataset": dataset("s3://lake", "busy", schema=schema("id", "amount")),
            }
            answer = await post(client, metadata)
            statuses.append((answer.status_code, answer.json().get("type")))
    finally:
        stop.set()
        await asyncio.gather(*writers)
    assert statuses == [(201, None)] * 3, statuses


# docs/openlineage.md: a COMPLETE "reads and writes what it names and what the run's
# earlier events named", and "Each event is appended on the condition that its run's
# stream is still where it was when its causes were read". The run's earlier events and
# its stream's head are read by separate statements (READ COMMITTED: a snapshot each):
# another process's event of the run that commits between them becomes the COMPLETE's
# previous event (its cause, its expected version), yet its datasets were never merged.
async def test_a_complete_racing_another_process_merges_the_event_it_follows(
    client: httpx2.AsyncClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = app.state
    mine, other = (LineageIngest(state.engine, state.appender, Limits()) for _ in range(2))
    acme = Principal(key_id="k", tenant="acme", scopes=frozenset())
    run = new_run()
    await post(client, run_event("START", run, "race", inputs=[dataset("s3://race", "in")]))
    running = run_event(
        "RUNNING", run, "race", outputs=[dataset("s3://race", "out")], time="2026-11-02T10:01:00Z"
    )
    complete = run_event("COMPLETE", run, "race", time="2026-11-02T10:05:00Z")
    original = fetch_all_stored
    raced = False

    async def meanwhile(conn: Any, tenant: str, ids: Any) -> Any:
        # Between the read of the run's earlier events and the read of its head: the
        # other process's RUNNING event commits (as a second worker's would).
        nonlocal raced
        if not raced:
            raced = True
            status, _, _ = await other.answer(acme, orjson.dumps(running))
            assert status == 201
        return await original(conn, tenant, ids)

    monkeypatch.setattr(router_module, "fetch_all_stored", meanwhile)
    status, body, _ = await mine.answer(acme, orjson.dumps(complete))
    monkeypatch.setattr(router_module, "fetch_all_stored", original)
    assert status == 201
    stream = (await client.get(f"/streams/openlineage:run:{run}")).json()
    assert [e["type"] for e in stream] == [
        "io.openlineage.run.start",
        "io.openlineage.run.running",
        "io.openlineage.run.complete",
    ]
    written = await versions_of(client, "s3://race", "out")
    assert written == [{"external": False, "writtenByRunId": run}], (written, orjson.loads(body))
