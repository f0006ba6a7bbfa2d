"""OpenLineage run events that come after their run's COMPLETE (a late START, a second
COMPLETE under the same runId) read their inputs as the run found them: the newest
version from before the run's first stored event. A second COMPLETE read the newest,
which was the run's own first output: the run was shown reading what it wrote."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import orjson

from tests.integration.events import JSON
from tests.integration.ingest.openlineage.shapes import dataset, facet, new_run, run_event

VERSIONS = """
query ($namespace: String!, $name: String!) {
  dataset(namespace: $namespace, name: $name) {
    versions { version writtenByRunId external readByRunIds }
  }
}
"""


async def post(client: httpx2.AsyncClient, sent: dict[str, Any], status: int = 201) -> Any:
    r = await client.post("/api/v1/lineage", content=orjson.dumps(sent), headers=JSON)
    assert r.status_code == status, r.text
    return orjson.loads(r.content)


async def versions(client: httpx2.AsyncClient, table: tuple[str, str]) -> Any:
    variables = {"namespace": table[0], "name": table[1]}
    body = (await client.post("/graphql", json={"query": VERSIONS, "variables": variables})).json()
    assert "errors" not in body, body
    found = body["data"]["dataset"]
    return None if found is None else found["versions"]


def vfacet(v: str) -> dict[str, Any]:
    return facet("DatasetVersionDatasetFacet", datasetVersion=v)


async def test_resend_of_a_late_start_that_read_nothing(client: httpx2.AsyncClient) -> None:
    """A late START whose input has versions only from after: a re-send answers the same."""
    table = ("s3://z3", f"t-{new_run()[:8]}")
    run, other = new_run(), new_run()
    await post(client, run_event("COMPLETE", run, "j", time="2026-11-02T10:01:00Z"))
    await post(client, run_event("COMPLETE", other, "w", outputs=[dataset(*table)]))
    start = run_event("START", run, "j", inputs=[dataset(*table)], time="2026-11-02T10:00:00Z")
    first = await post(client, start)
    again = await post(client, start, status=200)
    where = [(e["id"], e["position"]) for e in first["events"]]
    assert [(e["id"], e["position"]) for e in again["events"]] == where
    assert len(where) == 1  # the START alone: no external version after other's
    found = await versions(client, table)
    assert [(v["writtenByRunId"], v["readByRunIds"]) for v in found] == [(other, [])], found


async def test_a_second_complete_does_not_read_the_runs_own_output(
    client: httpx2.AsyncClient,
) -> None:
    """docs/openlineage.md: the input versions an event after its run's COMPLETE reads are
    "not one the run wrote itself". A second COMPLETE of the run (a retry of the job under
    the same runId, or a producer that sends two) is such an event."""
    table = ("s3://z3", f"m-{new_run()[:8]}")
    loader, merging = new_run(), new_run()
    await post(client, run_event("COMPLETE", loader, "load", outputs=[dataset(*table)]))
    await post(
        client,
        run_event("START", merging, "merge", inputs=[dataset(*table)], time="2026-11-02T10:00:00Z"),
    )
    await post(
        client,
        run_event(
            "COMPLETE", merging, "merge", outputs=[dataset(*table)], time="2026-11-02T10:01:00Z"
        ),
    )
    await post(
        client,
        run_event(
            "COMPLETE", merging, "merge", outputs=[dataset(*table)], time="2026-11-02T10:02:00Z"
        ),
    )
    found = await versions(client, table)
    own = [v for v in found if v["writtenByRunId"] == merging]
    assert all(merging not in v["readByRunIds"] for v in own), found


async def test_late_start_naming_a_stored_version_by_facet(client: httpx2.AsyncClient) -> None:
    """A late START naming its input's version by facet is linked to that version."""
    table = ("s3://z3", f"v-{new_run()[:8]}")
    loader, run, later = new_run(), new_run(), new_run()
    await post(
        client,
        run_event("COMPLETE", loader, "load", outputs=[dataset(*table, version=vfacet("1"))]),
    )
    await post(client, run_event("COMPLETE", run, "j", time="2026-11-02T10:01:00Z"))
    await post(
        client, run_event("COMPLETE", later, "load", outputs=[dataset(*table, version=vfacet("2"))])
    )
    await post(
        client,
        run_event(
            "START",
            run,
            "j",
            inputs=[dataset(*table, version=vfacet("1"))],
            time="2026-11-02T10:00:00Z",
        ),
    )
    found = await versions(client, table)
    assert [(v["version"], v["readByRunIds"]) for v in found] == [("1", [run]), ("2", [])], found


async def test_two_late_events_of_one_run_racing(client: httpx2.AsyncClient) -> None:
    table = ("s3://z3", f"r-{new_run()[:8]}")
    out1, out2 = ("s3://z3", f"o1-{new_run()[:8]}"), ("s3://z3", f"o2-{new_run()[:8]}")
    loader, run = new_run(), new_run()
    await post(client, run_event("COMPLETE", loader, "load", outputs=[dataset(*table)]))
    await post(client, run_event("COMPLETE", run, "j", time="2026-11-02T10:05:00Z"))
    start = run_event(
        "START",
        run,
        "j",
        inputs=[dataset(*table)],
        outputs=[dataset(*out1)],
        time="2026-11-02T10:00:00Z",
    )
    running = run_event(
        "RUNNING",
        run,
        "j",
        inputs=[dataset(*table)],
        outputs=[dataset(*out2)],
        time="2026-11-02T10:01:00Z",
    )
    await asyncio.gather(post(client, start), post(client, running))
    found = await versions(client, table)
    assert [(v["writtenByRunId"], v["readByRunIds"]) for v in found] == [(loader, [run])], found
    assert len(await versions(client, out1)) == 1
    assert len(await versions(client, out2)) == 1


async def test_a_complete_after_a_first_complete_reads_from_before_the_run(
    client: httpx2.AsyncClient,
) -> None:
    """The run's first stored event is a COMPLETE (attempt 1, a merge of TABLE); a second
    COMPLETE of the run (attempt 2, the same merge) arrives. It reads TABLE as the run
    found it (loader's version), not the version its own first COMPLETE wrote."""
    table = ("s3://z3", f"c-{new_run()[:8]}")
    loader, merging = new_run(), new_run()
    await post(client, run_event("COMPLETE", loader, "load", outputs=[dataset(*table)]))
    for minute in ("01", "02"):
        await post(
            client,
            run_event(
                "COMPLETE",
                merging,
                "merge",
                inputs=[dataset(*table)],
                outputs=[dataset(*table)],
                time=f"2026-11-02T10:{minute}:00Z",
            ),
        )
    found = await versions(client, table)
    assert [(v["writtenByRunId"], v["readByRunIds"]) for v in found][:2] == [
        (loader, [merging]),
        (merging, []),
    ], found


async def test_second_complete_reads_what_the_first_complete_read(
    client: httpx2.AsyncClient,
) -> None:
    """START names T (loader's v1); another run writes T (v2); COMPLETE reads T's latest
    (v2, the causes table). A retried COMPLETE of the same run names the same input: the
    run should read one version of T, the one its first COMPLETE read."""
    table = ("s3://z4", f"t-{new_run()[:8]}")
    out = ("s3://z4", f"o-{new_run()[:8]}")
    loader, other, run = new_run(), new_run(), new_run()
    await post(client, run_event("COMPLETE", loader, "load", outputs=[dataset(*table)]))
    await post(
        client,
        run_event("START", run, "j", inputs=[dataset(*table)], time="2026-11-02T10:00:00Z"),
    )
    await post(client, run_event("COMPLETE", other, "load", outputs=[dataset(*table)]))
    for minute in ("01", "02"):
        await post(
            client,
            run_event(
                "COMPLETE",
                run,
                "j",
                inputs=[dataset(*table)],
                outputs=[dataset(*out)],
                time=f"2026-11-02T10:{minute}:00Z",
            ),
        )
    found = await versions(client, table)
    read = [v["writtenByRunId"] for v in found if run in v["readByRunIds"]]
    assert read == [other], found


async def test_fail_after_complete_writes_no_version(client: httpx2.AsyncClient) -> None:
    """docs/openlineage.md: 'a FAIL or an ABORT writes none'."""
    out = ("s3://z4", f"f-{new_run()[:8]}")
    run = new_run()
    await post(client, run_event("COMPLETE", run, "j", time="2026-11-02T10:01:00Z"))
    await post(
        client,
        run_event("FAIL", run, "j", outputs=[dataset(*out)], time="2026-11-02T10:02:00Z"),
    )
    found = await versions(client, out)
    assert not found, found
