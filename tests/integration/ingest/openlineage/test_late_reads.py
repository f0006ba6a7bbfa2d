"""A late run event (after its run's COMPLETE) reads its inputs "as the COMPLETE would
have" (docs/openlineage.md): the newest version from before the run's first stored
event. Reading "the newest version the run did not write" instead made a merge that
no other run had written append an external version after its own output (every
later reader was linked to that version, with no causes, and lost the merge), and
linked a run to a version another run wrote after it had finished."""

from __future__ import annotations

from typing import Any

import httpx2
import orjson

from tests.integration.events import JSON
from tests.integration.ingest.openlineage.audits import audit_of_a_decision
from tests.integration.ingest.openlineage.shapes import dataset, new_run, run_event

VERSIONS = """
query ($namespace: String!, $name: String!) {
  dataset(namespace: $namespace, name: $name) {
    versions { writtenByRunId external readByRunIds }
  }
}
"""
TABLE = ("s3://lake", "accounts")
OTHER = ("s3://lake", "features")


async def post(client: httpx2.AsyncClient, sent: dict[str, Any]) -> None:
    r = await client.post("/api/v1/lineage", content=orjson.dumps(sent), headers=JSON)
    assert r.status_code == 201, r.text


async def versions(client: httpx2.AsyncClient, table: tuple[str, str] = TABLE) -> Any:
    variables = {"namespace": table[0], "name": table[1]}
    body = (await client.post("/graphql", json={"query": VERSIONS, "variables": variables})).json()
    assert "errors" not in body, body
    return body["data"]["dataset"]["versions"]


async def merge_then_read(client: httpx2.AsyncClient, *, complete_first: bool) -> tuple[str, str]:
    """Run ``merging`` reads and writes TABLE, which no other run wrote (START names it
    as input, COMPLETE as output); then run ``reader`` reads TABLE."""
    merging, reader = new_run(), new_run()
    start = run_event(
        "START", merging, "merge", inputs=[dataset(*TABLE)], time="2026-11-02T10:00:00Z"
    )
    complete = run_event(
        "COMPLETE", merging, "merge", outputs=[dataset(*TABLE)], time="2026-11-02T10:01:00Z"
    )
    for sent in (complete, start) if complete_first else (start, complete):
        await post(client, sent)
    await post(
        client,
        run_event(
            "COMPLETE",
            reader,
            "train",
            inputs=[dataset(*TABLE)],
            outputs=[dataset(*OTHER)],
            time="2026-11-02T11:00:00Z",
        ),
    )
    return merging, reader


async def test_in_order_a_later_reader_reads_the_merges_output(client: httpx2.AsyncClient) -> None:
    merging, reader = await merge_then_read(client, complete_first=False)
    assert await versions(client) == [
        {"writtenByRunId": None, "external": True, "readByRunIds": [merging]},
        {"writtenByRunId": merging, "external": False, "readByRunIds": [reader]},
    ]


async def test_complete_first_a_later_reader_still_reads_the_merges_output(
    client: httpx2.AsyncClient,
) -> None:
    """The late START finds no version of TABLE the run did not write, so it appends an
    external version *after* the run's own output: that external version is now the
    table's newest, and every later reader (and DatasetEvent) is linked to it, a version
    with no causes, instead of to the merge's output."""
    merging, reader = await merge_then_read(client, complete_first=True)
    found = await versions(client)
    [written] = [v for v in found if v["writtenByRunId"] == merging]
    assert reader in written["readByRunIds"], found


AUDIT = "query ($id: ID!) { audit(decisionId: $id) { datasets { writtenByRunId external } } }"


async def test_complete_first_an_audit_downstream_still_reaches_the_merge(
    client: httpx2.AsyncClient, admin: httpx2.AsyncClient
) -> None:
    merging, reader = await merge_then_read(client, complete_first=True)
    found = (await audit_of_a_decision(client, admin, reader, AUDIT))["data"]["audit"]
    assert {"writtenByRunId": merging, "external": False} in found["datasets"], found


async def test_a_late_start_does_not_read_a_version_written_after_its_runs_complete(
    client: httpx2.AsyncClient,
) -> None:
    """`loader` writes TABLE; `training` completes (its COMPLETE names only its output);
    then `later` writes TABLE again; then training's START, naming TABLE as its input,
    arrives late. The COMPLETE would have read loader's version (docs/openlineage.md:
    the late event "reads and writes as the COMPLETE would have"); the late START reads
    `later`'s, written after the training run had finished."""
    loader, training, later = new_run(), new_run(), new_run()
    await post(
        client,
        run_event(
            "COMPLETE", loader, "load", outputs=[dataset(*TABLE)], time="2026-11-02T09:00:00Z"
        ),
    )
    start = run_event(
        "START", training, "train", inputs=[dataset(*TABLE)], time="2026-11-02T10:00:00Z"
    )
    complete = run_event(
        "COMPLETE", training, "train", outputs=[dataset(*OTHER)], time="2026-11-02T10:01:00Z"
    )
    await post(client, complete)
    await post(
        client,
        run_event(
            "COMPLETE", later, "load", outputs=[dataset(*TABLE)], time="2026-11-02T12:00:00Z"
        ),
    )
    await post(client, start)  # late
    assert await versions(client) == [
        {"writtenByRunId": loader, "external": False, "readByRunIds": [training]},
        {"writtenByRunId": later, "external": False, "readByRunIds": []},
    ]


async def test_upper_case_run_id_merge_complete_first(client: httpx2.AsyncClient) -> None:
    # Run ids are canonicalised: an upper-case one is the same run.
    first, merging = new_run(), new_run()
    await post(client, run_event("COMPLETE", first, "load", outputs=[dataset(*TABLE)]))
    await post(client, run_event("COMPLETE", merging.upper(), "merge", outputs=[dataset(*TABLE)]))
    await post(client, run_event("START", merging.upper(), "merge", inputs=[dataset(*TABLE)]))
    assert await versions(client) == [
        {"writtenByRunId": first, "external": False, "readByRunIds": [merging]},
        {"writtenByRunId": merging, "external": False, "readByRunIds": []},
    ]
