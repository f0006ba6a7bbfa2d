"""One run, however its UUID is written: the store keys runs by the canonical form (lower
case, hyphenated), so the registry's ``training_run`` (which takes braces, ``urn:uuid:``
and no hyphens too) and a run's events written in upper case still meet."""

from __future__ import annotations

import httpx2
import orjson
import pytest

from tests.integration.events import JSON
from tests.integration.ingest.openlineage.audits import audit_of_a_decision
from tests.integration.ingest.openlineage.shapes import dataset, run_event

AUDIT = """
query ($id: ID!) {
  audit(decisionId: $id) { trainingRuns { run { runId state } } datasets { name } }
}
"""
RUN = "0190a3e2-5b8c-7d4e-9f00-0123456789ab"


async def lineage(client: httpx2.AsyncClient, sent: dict[str, object]) -> None:
    response = await client.post("/api/v1/lineage", content=orjson.dumps(sent), headers=JSON)
    assert response.status_code == 201, response.text


# The registry kept the text as sent, and the run's events were on a stream named by the
# text they sent: the same UUID written otherwise linked the model to no run.
@pytest.mark.parametrize(
    ("sent", "named"),
    [
        (RUN, RUN.replace("-", "")),
        (RUN, RUN.upper()),
        (RUN, "{" + RUN + "}"),
        (RUN, "urn:uuid:" + RUN),
        (RUN.upper(), RUN),
    ],
    ids=["no-hyphens", "upper-case", "braces", "urn", "events-in-upper-case"],
)
async def test_a_training_run_written_otherwise_is_the_same_run(
    client: httpx2.AsyncClient, admin: httpx2.AsyncClient, sent: str, named: str
) -> None:
    await lineage(client, run_event("START", sent, "train"))
    complete = run_event("COMPLETE", sent, "train", inputs=[dataset("s3://lake", "training")])
    await lineage(client, complete)
    answer = await audit_of_a_decision(client, admin, named, AUDIT)
    audit = answer["data"]["audit"]
    assert audit["trainingRuns"] == [{"run": {"runId": RUN, "state": "COMPLETE"}}], answer
    assert audit["datasets"] == [{"name": "training"}]
