"""The official ``openlineage-python`` client's HTTP transport, with its API-key auth as
shipped, against a running ``causeway serve``: a training pipeline, a model version
trained by it, inference and a decision, and one audit from the decision back to the
training data."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from secrets import token_hex
from typing import Any

import httpx2
import pytest
from openlineage.client.client import OpenLineageClient
from openlineage.client.event_v2 import (
    InputDataset,
    Job,
    OutputDataset,
    Run,
    RunEvent,
    RunState,
)
from openlineage.client.facet_v2 import output_statistics_output_dataset, schema_dataset
from openlineage.client.serde import Serde
from openlineage.client.transport.http import ApiKeyTokenProvider, HttpConfig, HttpTransport
from openlineage.client.uuid import generate_new_uuid
from sqlalchemy import URL

from app.db.engine import create_engine
from app.store.keys import KeyStore, parse_scopes
from tests.conftest import janitor
from tests.integration.events import JSON, STRUCTURED, dumps, event, registration
from tests.integration.process import environment, serving

PRODUCER = "https://github.com/acme/pipelines/tree/v1"
AUDIT = """
query ($id: ID!) {
  audit(decisionId: $id) {
    models { name version }
    trainingRuns { modelName modelVersion run { runId state job { name } events { type } } }
    datasets { namespace name external schema rowCount writtenByRunId }
    chainVerified
    truncated
  }
}
"""


@pytest.fixture
def served(server: URL, template_db: str) -> Iterator[tuple[str, dict[str, str]]]:
    """One ``causeway serve``: its base URL, and keys by name (made in this process: a
    ``causeway keys create`` process apiece would take seconds)."""
    name = f"causeway_openlineage_{token_hex(4)}"
    with janitor(server, name, template_dbname=template_db):
        url = server.set(database=name)
        env = environment(
            CAUSEWAY_DATABASE_URL=url.render_as_string(hide_password=False),
            CAUSEWAY_RUN_SCHEDULER="false",
        )
        keys = asyncio.run(_make_keys(url))
        with serving(env) as base:
            yield base, keys


async def _make_keys(url: URL) -> dict[str, str]:
    engine = create_engine(url, pool_size=1)
    made = {}
    try:
        for key, tenant, scopes in [
            ("ingest", "acme", "ingest,read"),
            ("admin", "acme", "admin"),
        ]:
            async with engine.begin() as conn:
                made[key] = (await KeyStore(conn).create(tenant, parse_scopes(scopes))).key
    finally:
        await engine.dispose()
    return made


def transport(base: str, key: str) -> HttpTransport:
    auth = ApiKeyTokenProvider({"apiKey": key})
    return HttpTransport(HttpConfig(url=base, auth=auth))


def run_event(
    state: RunState,
    run_id: str,
    job: str,
    inputs: list[InputDataset],
    outputs: list[OutputDataset],
) -> RunEvent:
    return RunEvent(
        eventType=state,
        eventTime="2026-11-02T10:00:00.000Z",
        run=Run(runId=run_id),
        job=Job(namespace="pipelines", name=job),
        producer=PRODUCER,
        inputs=inputs,
        outputs=outputs,
    )


def run_job(client: OpenLineageClient, job: str, inputs: Any, outputs: Any) -> str:
    run_id = str(generate_new_uuid())
    client.emit(run_event(RunState.START, run_id, job, inputs, []))
    client.emit(run_event(RunState.COMPLETE, run_id, job, inputs, outputs))
    return run_id


def test_one_audit_runs_from_the_training_data_to_the_decision(
    served: tuple[str, dict[str, str]],
) -> None:
    base, keys = served
    key, admin = keys["ingest"], keys["admin"]
    client = OpenLineageClient(transport=transport(base, key))
    columns = schema_dataset.SchemaDatasetFacet(
        fields=[schema_dataset.SchemaDatasetFacetFields(name="amount", type="DOUBLE")]
    )
    table = InputDataset(
        namespace="postgres://db:5432", name="bank.public.payments", facets={"schema": columns}
    )
    stats = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(rowCount=5000)
    features = OutputDataset(
        namespace="s3://features",
        name="fraud_features",
        outputFacets={"outputStatistics": stats},
    )
    extract = run_job(client, "extract_features", [table], [features])
    feature_input = InputDataset(namespace="s3://features", name="fraud_features")
    training = run_job(client, "train_fraud_model", [feature_input], [])

    with httpx2.Client(base_url=base, headers={"Authorization": f"Bearer {admin}"}) as http:
        registered = http.post(
            "/models/fraud/versions",
            content=registration("7", training_run=training),
            headers=JSON,
        )
        assert registered.status_code == 201, registered.text
    with httpx2.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as http:
        inference = event(
            type="com.acme.fraud.score.v1",
            modelname="fraud",
            modelversion="7",
            data={"score": 0.97},
        )
        decision = event(type="com.acme.payment.blocked.v1", causationid=inference["id"])
        for sent in (inference, decision):
            assert http.post("/events", content=dumps(sent), headers=STRUCTURED).status_code == 201
        answer = http.post("/graphql", json={"query": AUDIT, "variables": {"id": decision["id"]}})
    audit = answer.json()["data"]["audit"]
    assert audit["models"] == [{"name": "fraud", "version": "7"}]
    [trained] = audit["trainingRuns"]
    assert (trained["modelName"], trained["modelVersion"]) == ("fraud", "7")
    assert trained["run"]["runId"] == training
    assert trained["run"]["state"] == "COMPLETE"
    assert trained["run"]["job"] == {"name": "train_fraud_model"}
    datasets = {(d["namespace"], d["name"]): d for d in audit["datasets"]}
    assert datasets.keys() == {
        ("postgres://db:5432", "bank.public.payments"),
        ("s3://features", "fraud_features"),
    }
    payments = datasets["postgres://db:5432", "bank.public.payments"]
    assert payments["external"] is True
    assert [(f["name"], f["type"]) for f in payments["schema"]] == [("amount", "DOUBLE")]
    written = datasets["s3://features", "fraud_features"]
    assert (written["rowCount"], written["writtenByRunId"]) == (5000, extract)
    assert audit["chainVerified"] is True
    assert audit["truncated"] is False
    # (one serve for the whole test: starting one takes seconds)
    _a_retry_is_stored_once(base, key)
    _a_malformed_event_is_refused_with_its_pointer(base, key)


def _a_retry_is_stored_once(base: str, key: str) -> None:
    sender = transport(base, key)
    sent = run_event(RunState.START, str(generate_new_uuid()), "retried", [], [])
    first, again = sender.emit(sent), sender.emit(sent)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["events"][0]["position"] == first.json()["events"][0]["position"]


def _a_malformed_event_is_refused_with_its_pointer(base: str, key: str) -> None:
    bad = run_event(RunState.START, str(generate_new_uuid()), "bad", [], [])
    body = dumps({**Serde.to_dict(bad), "eventTime": "yesterday"})  # not RFC 3339
    response = httpx2.post(
        f"{base}/api/v1/lineage",
        content=body,
        headers={**JSON, "Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["pointer"] == "#/eventTime"
