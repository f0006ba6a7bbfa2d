"""``POST /api/v1/lineage`` through the app: events shaped like Airflow's and Spark's,
the dataset versions and causes they make, refusals, retries, and tenants."""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
from collections.abc import Callable
from typing import Any

import httpx2
import orjson
import pytest
from fastapi import FastAPI

from app.settings import Settings
from app.store.keys import Principal
from ingest.limits import Limits
from ingest.openlineage.router import LineageIngest
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import STRUCTURED, causes_of, dumps, event, registration
from tests.integration.ingest.openlineage.shapes import (
    SPARK,
    SPEC,
    dataset,
    facet,
    new_run,
    run_event,
    schema,
)

DATASET_QUERY = """
query ($namespace: String!, $name: String!) {
  dataset(namespace: $namespace, name: $name) {
    namespace name
    versions { version external schema rowCount writtenByRunId readByRunIds event { id causes { id } } }
    runs { runId state job { namespace name } parentRunId events { type } }
    metadataEvents { type dataBase64 }
  }
}
"""


async def post(client: httpx2.AsyncClient, event: dict[str, Any]) -> httpx2.Response:
    return await client.post("/api/v1/lineage", content=orjson.dumps(event), headers=JSON)


JSON = {"Content-Type": "application/json"}
RUN = "0190a3e2-5b8c-7d4e-9f00-0123456789ab"
# Text that does not compress (PostgreSQL compresses a long index entry before it refuses it)
LONG = "".join(hashlib.sha256(bytes([i])).hexdigest() for i in range(125))


async def ask(client: httpx2.AsyncClient, query: str, **variables: Any) -> dict[str, Any]:
    response = await client.post("/graphql", json={"query": query, "variables": variables})
    body: dict[str, Any] = response.json()
    assert "errors" not in body, body
    data: dict[str, Any] = body["data"]
    return data


class TestAirflowDag:
    async def test_a_dag_run_with_tasks_makes_versions_and_causes(
        self, client: httpx2.AsyncClient
    ) -> None:
        dag, task = new_run(), new_run()
        orders = dataset("postgres://db:5432", "shop.public.orders", schema=schema("id", "total"))
        daily = dataset("s3://lake", "daily_totals")
        sql = facet("SQLJobFacet", query="INSERT INTO daily_totals SELECT ...")
        assert (await post(client, run_event("START", dag, "etl"))).status_code == 201
        start = await post(
            client,
            run_event("START", task, "etl.aggregate", inputs=[orders], parent=(dag, "etl")),
        )
        assert start.status_code == 201
        # the first time orders is named: an external version of it, then the START
        [external, started] = start.json()["events"]
        assert external["stream"] == "openlineage:dataset:postgres%3A//db%3A5432:shop.public.orders"
        assert started["stream"] == f"openlineage:run:{task}"
        complete = run_event(
            "COMPLETE",
            task,
            "etl.aggregate",
            inputs=[orders],
            outputs=[
                dict(
                    daily,
                    outputFacets={
                        "outputStatistics": facet("OutputStatisticsOutputDatasetFacet", rowCount=31)
                    },
                )
            ],
            parent=(dag, "etl"),
            time="2026-11-02T10:05:00Z",
        )
        complete["job"]["facets"]["sql"] = sql
        done = await post(client, complete)
        assert done.status_code == 201
        [completed, written] = done.json()["events"]
        stored = (await client.get(f"/events/{completed['id']}")).json()
        assert stored["type"] == "io.openlineage.run.complete"
        assert stored["source"] == complete["producer"]
        # the START before it, the parent DAG run's START, and the input's version
        assert causes_of(stored) == [
            started["id"],
            _first_id(await _stream(client, dag)),
            external["id"],
        ]
        answer = await ask(client, DATASET_QUERY, namespace="s3://lake", name="daily_totals")
        [version] = answer["dataset"]["versions"]
        assert (version["rowCount"], version["external"]) == (31, False)
        assert version["writtenByRunId"] == task
        assert version["event"] == {"id": written["id"], "causes": [{"id": completed["id"]}]}
        [run] = answer["dataset"]["runs"]
        assert (run["state"], run["parentRunId"]) == ("COMPLETE", dag)
        assert run["job"] == {"namespace": "airflow", "name": "etl.aggregate"}
        read = await ask(
            client, DATASET_QUERY, namespace="postgres://db:5432", name="shop.public.orders"
        )
        [orders_version] = read["dataset"]["versions"]
        assert orders_version["external"] is True
        assert orders_version["schema"] == [
            {"name": "id", "type": "STRING"},
            {"name": "total", "type": "STRING"},
        ]
        assert orders_version["readByRunIds"] == [task]

    async def test_a_failed_task_keeps_its_error_facet_and_writes_no_version(
        self, client: httpx2.AsyncClient
    ) -> None:
        run = new_run()
        out = dataset("s3://lake", "never_written")
        error = facet(
            "ErrorMessageRunFacet",
            message="division by zero",
            programmingLanguage="python",
            stackTrace="Traceback ...",
        )
        await post(client, run_event("START", run, "etl.divide", outputs=[out]))
        failed = await post(
            client, run_event("FAIL", run, "etl.divide", outputs=[out], errorMessage=error)
        )
        assert failed.status_code == 201
        [event] = failed.json()["events"]
        assert (await client.get(f"/events/{event['id']}")).json()[
            "type"
        ] == "io.openlineage.run.fail"
        answer = await ask(client, DATASET_QUERY, namespace="s3://lake", name="never_written")
        assert answer["dataset"] is None


class TestSparkAndStaticEvents:
    async def test_the_original_event_is_stored_byte_for_byte(
        self, client: httpx2.AsyncClient
    ) -> None:
        run = new_run()
        event = run_event("RUNNING", run, "spark_app.execute_insert", producer=SPARK)
        # Spark's own spacing, key order and a float the log would otherwise normalise
        body = orjson.dumps(event, option=orjson.OPT_INDENT_2).replace(b'"RUNNING"', b'"RUNNING" ')
        body = body.replace(b'"run": {', b'"extra": 1.0, "run": {')
        response = await client.post("/api/v1/lineage", content=body, headers=JSON)
        assert response.status_code == 201, response.text
        [stored] = response.json()["events"]
        read = (await client.get(f"/events/{stored['id']}")).json()
        assert base64.b64decode(read["data_base64"]) == body
        assert read["datacontenttype"] == "application/json"
        assert read["dataschema"] == f"{SPEC}#/$defs/RunEvent"

    async def test_a_gzip_body_from_the_client_compression(
        self, client: httpx2.AsyncClient
    ) -> None:
        body = orjson.dumps(run_event("START", new_run(), "spark_app", producer=SPARK))
        response = await client.post(
            "/api/v1/lineage",
            content=gzip.compress(body),
            headers={**JSON, "Content-Encoding": "gzip"},
        )
        assert response.status_code == 201, response.text
        [stored] = response.json()["events"]
        read = (await client.get(f"/events/{stored['id']}")).json()
        assert base64.b64decode(read["data_base64"]) == body

    # Inflated as far as it went: a body cut before its trailer was stored unchecked (its
    # CRC-32 never read), and what followed a first member was dropped.
    @pytest.mark.parametrize(
        ("cut", "detail"),
        [
            (lambda z: z[:-8], "the gzip body is cut short: its end (and its checksum) is missing"),
            (lambda z: z + z, "the gzip body goes on past its end: send one gzip member"),
        ],
        ids=["no-trailer", "two-members"],
    )
    async def test_a_gzip_body_cut_short_or_run_on_is_a_400(
        self, client: httpx2.AsyncClient, cut: Callable[[bytes], bytes], detail: str
    ) -> None:
        body = orjson.dumps(run_event("START", new_run(), "spark_app", producer=SPARK))
        response = await client.post(
            "/api/v1/lineage",
            content=cut(gzip.compress(body)),
            headers={**JSON, "Content-Encoding": "gzip"},
        )
        assert response.status_code == 400, response.text
        assert response.json()["detail"] == detail

    async def test_a_dataset_event_alone(self, client: httpx2.AsyncClient) -> None:
        event = {
            "eventTime": "2026-11-02T09:00:00Z",
            "producer": SPARK,
            "schemaURL": f"{SPEC}#/$defs/DatasetEvent",
            "dataset": dataset("s3://lake", "customers", schema=schema("id", "email")),
        }
        response = await post(client, event)
        assert response.status_code == 201, response.text
        [stored] = response.json()["events"]
        assert stored["stream"] == "openlineage:dataset:s3%3A//lake:customers"
        answer = await ask(client, DATASET_QUERY, namespace="s3://lake", name="customers")
        [static] = answer["dataset"]["metadataEvents"]
        assert static["type"] == "io.openlineage.dataset.event"
        assert orjson.loads(base64.b64decode(static["dataBase64"])) == event
        assert answer["dataset"]["versions"] == []

    async def test_a_job_event(self, client: httpx2.AsyncClient) -> None:
        event = {
            "eventTime": "2026-11-02T09:00:00Z",
            "producer": SPARK,
            "schemaURL": f"{SPEC}#/$defs/JobEvent",
            "job": {"namespace": "spark", "name": "nightly"},
        }
        response = await post(client, event)
        assert response.status_code == 201, response.text
        [stored] = response.json()["events"]
        read = (await client.get(f"/events/{stored['id']}")).json()
        assert read["type"] == "io.openlineage.job.event"
        assert read["stream"] == "openlineage:job:spark:nightly"


class TestOrderAndRetries:
    async def test_complete_before_start_is_stored_and_start_follows_it(
        self, client: httpx2.AsyncClient
    ) -> None:
        run = new_run()
        done = await post(client, run_event("COMPLETE", run, "late", time="2026-11-02T10:05:00Z"))
        start = await post(client, run_event("START", run, "late"))
        assert (done.status_code, start.status_code) == (201, 201)
        [completed], [started] = done.json()["events"], start.json()["events"]
        read = (await client.get(f"/events/{started['id']}")).json()
        assert causes_of(read) == [completed["id"]]  # causes follow arrival, not eventTime
        assert started["stream_version"] == 2

    async def test_a_retry_is_stored_once(self, client: httpx2.AsyncClient) -> None:
        event = run_event("START", new_run(), "once")
        first, again = await post(client, event), await post(client, event)
        assert (first.status_code, again.status_code) == (201, 200)
        assert again.json()["events"] == [dict(first.json()["events"][0], duplicate=True)]

    async def test_a_retry_is_answered_with_the_dataset_versions_it_made(
        self, client: httpx2.AsyncClient
    ) -> None:
        """The first answer lists the versions of inputs it named first and of its outputs;
        a retry's lists the same events (a client that reads the answer sees no loss)."""
        await post(
            client, run_event("COMPLETE", new_run(), "seen", outputs=[dataset("s3://r", "old")])
        )
        event = run_event(
            "COMPLETE",
            new_run(),
            "retried",
            inputs=[dataset("s3://r", "old"), dataset("s3://r", "new")],
            outputs=[dataset("s3://r", "out")],
        )
        first, again = await post(client, event), await post(client, event)
        assert (first.status_code, again.status_code) == (201, 200)
        listed = first.json()["events"]
        assert len(listed) == 3  # the new input's external version, the run event, the output
        assert again.json()["events"] == [dict(e, duplicate=True) for e in listed]

    async def test_events_of_one_run_sent_at_once_are_all_chained(
        self, client: httpx2.AsyncClient
    ) -> None:
        run = new_run()
        sent = [
            run_event("RUNNING", run, "spark", time=f"2026-11-02T10:00:{i:02d}Z") for i in range(8)
        ]
        answers = await asyncio.gather(*(post(client, e) for e in sent))
        assert [a.status_code for a in answers] == [201] * 8
        events = await _stream(client, run)
        assert [e["streamversion"] for e in events] == list(range(1, 9))
        # one after the other: each caused by the one before, none by the same
        assert [causes_of(e) for e in events] == [[], *([e["id"]] for e in events[:-1])]

    async def test_events_of_one_run_racing_from_two_processes_are_all_chained(
        self, client: httpx2.AsyncClient, app: FastAPI
    ) -> None:
        """Two processes' ingests share no lock: the loser of a race plans again."""
        state = app.state
        ingests = [LineageIngest(state.engine, state.appender, Limits()) for _ in range(2)]
        acme = Principal(key_id="k", tenant="acme", scopes=frozenset())
        run = new_run()
        sent = [
            run_event("RUNNING", run, "spark", time=f"2026-11-02T10:00:{i:02d}Z") for i in range(8)
        ]
        answers = await asyncio.gather(
            *(ingests[i % 2].answer(acme, orjson.dumps(e)) for i, e in enumerate(sent))
        )
        assert [status for status, _, _ in answers] == [201] * 8
        events = await _stream(client, run)
        assert [e["streamversion"] for e in events] == list(range(1, 9))
        assert [causes_of(e) for e in events] == [[], *([e["id"]] for e in events[:-1])]


class TestRefusals:
    async def test_a_malformed_event_is_refused_with_its_pointer(
        self, client: httpx2.AsyncClient
    ) -> None:
        event = run_event("START", "not-a-uuid", "bad")
        response = await post(client, event)
        assert response.status_code == 422
        assert response.headers["content-type"] == "application/problem+json"
        problem = response.json()
        assert problem["type"] == "/problems/invalid-openlineage-event"
        assert problem["errors"][0]["pointer"] == "#/run/runId"
        missing = {k: v for k, v in run_event("START", new_run(), "x").items() if k != "eventTime"}
        assert (await post(client, missing)).json()["errors"][0]["pointer"] == "#"
        # a facet without _producer and _schemaURL: pointed at, not the whole map of facets
        bad_facet = run_event("START", new_run(), "x", nominalTime={"nominalStartTime": "x"})
        [error, *_] = (await post(client, bad_facet)).json()["errors"]
        assert error["pointer"] == "#/run/facets/nominalTime"
        assert "is a required property" in error["detail"]
        table = dataset("s3://lake", "t", broken={"_schemaURL": "https://s"})
        bad_input = run_event("START", new_run(), "x", inputs=[table])
        [error, *_] = (await post(client, bad_input)).json()["errors"]
        assert error == {
            "pointer": "#/inputs/0/facets/broken",
            "detail": "'_producer' is a required property",
        }
        nul = await post(client, run_event("START", new_run(), "nul\u0000"))
        assert nul.status_code == 422
        assert "U+0000" in nul.json()["detail"]

    @pytest.mark.parametrize(
        ("where", "event"),
        [
            (
                "#/outputs/0/name",
                run_event("COMPLETE", RUN, "j", outputs=[dataset("s3://l", LONG)]),
            ),
            ("#/inputs/0/namespace", run_event("START", RUN, "j", inputs=[dataset(LONG, "t")])),
            ("#/producer", run_event("START", RUN, "j", producer=f"https://p/{LONG}")),
            ("#/job/name", run_event("START", RUN, LONG)),
            ("#/run/facets/parent/run/runId", run_event("START", RUN, "j", parent=(LONG, "p"))),
        ],
        ids=["dataset-name", "dataset-namespace", "producer", "job-name", "parent-run-id"],
    )
    async def test_a_name_too_long_to_keep_is_refused_naming_it(
        self, client: httpx2.AsyncClient, where: str, event: dict[str, Any]
    ) -> None:
        response = await post(client, event)
        assert response.status_code == 422, response.text
        problem = response.json()
        assert problem["type"] == "/problems/event-too-large"
        assert problem["errors"][0]["pointer"] == where
        assert "over the 1024-byte limit" in problem["detail"]
        assert (await client.get(f"/streams/openlineage:run:{RUN}")).status_code == 404

    async def test_a_name_within_the_limit_is_stored(self, client: httpx2.AsyncClient) -> None:
        # the stream "openlineage:dataset:s3%3A//l:<name>" takes 1024 bytes: the most
        name = LONG[: 1024 - len("openlineage:dataset:s3%3A//l:")]
        event = run_event("COMPLETE", new_run(), "j", outputs=[dataset("s3://l", name)])
        assert (await post(client, event)).status_code == 201

    async def test_the_ingest_scope_is_needed(self, app: FastAPI, make_key: MakeKey) -> None:
        async with asgi_client(app, await make_key("acme", "read")) as reader:
            response = await post(reader, run_event("START", new_run(), "x"))
        assert response.status_code == 403
        async with asgi_client(app, "nope") as stranger:
            assert (await post(stranger, run_event("START", new_run(), "x"))).status_code == 401


class TestParentFacet:
    @pytest.mark.parametrize(
        ("parent", "correlated"),
        [
            ({"run": "not-an-object"}, "run"),
            ({"run": {"runId": RUN}, "root": "not-an-object"}, "parent"),
            ({"run": {"runId": RUN}, "root": {"run": 5}}, "parent"),
        ],
        ids=["run-is-a-string", "root-is-a-string", "root-run-is-a-number"],
    )
    async def test_a_parent_facet_of_another_shape_names_no_run(
        self, client: httpx2.AsyncClient, parent: dict[str, Any], correlated: str
    ) -> None:
        """The schema checks no facet's body: a parent facet of another shape is stored as
        sent, and names no parent (or no root) run."""
        run = new_run()
        event = run_event("START", run, "child")
        job = {"namespace": "airflow", "name": "dag"}
        event["run"]["facets"]["parent"] = facet("ParentRunFacet", job=job, **parent)
        response = await post(client, event)
        assert response.status_code == 201, response.text
        [stored] = response.json()["events"]
        read = (await client.get(f"/events/{stored['id']}")).json()
        assert read["correlationid"] == (run if correlated == "run" else RUN)
        assert causes_of(read) == []


class TestTimeInFuture:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings(_env_file=None, max_future_s=60)

    async def test_an_event_time_past_max_future_s_is_refused(
        self, client: httpx2.AsyncClient
    ) -> None:
        run = new_run()
        response = await post(client, run_event("START", run, "j", time="2999-01-01T00:00:00Z"))
        assert response.status_code == 422, response.text
        problem = response.json()
        assert problem["type"] == "/problems/time-in-future"
        assert problem["errors"][0]["pointer"] == "#/eventTime"
        assert "CAUSEWAY_MAX_FUTURE_S" in problem["detail"]
        assert (await client.get(f"/streams/openlineage:run:{run}")).status_code == 404
        assert (await post(client, run_event("START", run, "j"))).status_code == 201


class TestTenants:
    async def test_another_tenant_sees_no_dataset_and_builds_its_own(
        self, client: httpx2.AsyncClient, app: FastAPI, make_key: MakeKey
    ) -> None:
        event = run_event("COMPLETE", new_run(), "t", outputs=[dataset("s3://x", "shared")])
        await post(client, event)
        async with asgi_client(app, await make_key("globex", "ingest,read")) as other:
            answer = await ask(other, DATASET_QUERY, namespace="s3://x", name="shared")
            assert answer["dataset"] is None
            again = await post(other, event)  # the same event, new in this tenant
            assert again.status_code == 201


AUDIT = """
query ($id: ID!) {
  audit(decisionId: $id) {
    trainingRuns { run { runId state events { id } } }
    datasets { name }
    chainVerified
  }
}
"""


class TestAuditTenants:
    async def test_an_audit_never_reaches_another_tenants_training_run(
        self, client: httpx2.AsyncClient, app: FastAPI, make_key: MakeKey
    ) -> None:
        run = new_run()
        await post(client, run_event("COMPLETE", run, "train", inputs=[dataset("s3://x", "d")]))
        async with (
            asgi_client(app, await make_key("globex", "ingest,read")) as other,
            asgi_client(app, await make_key("globex", "admin")) as other_admin,
        ):
            body = registration("1", training_run=run)  # acme's run, named in tenant other
            response = await other_admin.post("/models/m/versions", content=body, headers=JSON)
            assert response.status_code == 201, response.text
            used = event(modelname="m", modelversion="1")
            decision = event(causationid=used["id"])
            for sent in (used, decision):
                stored = await other.post("/events", content=dumps(sent), headers=STRUCTURED)
                assert stored.status_code == 201, stored.text
            answer = (await ask(other, AUDIT, id=decision["id"]))["audit"]
        assert answer["trainingRuns"] == [{"run": {"runId": run, "state": None, "events": []}}]
        assert answer["datasets"] == []
        assert answer["chainVerified"] is True


async def _stream(client: httpx2.AsyncClient, run: str) -> list[dict[str, Any]]:
    response = await client.get(f"/streams/openlineage:run:{run}")
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = response.json()
    return events


def _first_id(events: list[dict[str, Any]]) -> str:
    return str(events[0]["id"])


LINEAGE = """
query ($id: ID!) {
  lineage(id: $id, direction: DOWNSTREAM, maxDepth: 10) { nodes { event { type } } }
}
"""


class TestModels:
    async def test_a_model_version_names_its_training_run_and_lineage_crosses_to_it(
        self, client: httpx2.AsyncClient, admin: httpx2.AsyncClient, app: FastAPI
    ) -> None:
        run = new_run()
        data = dataset("s3://lake", "labelled")
        start = await post(client, run_event("START", run, "train", inputs=[data]))
        [external, _] = start.json()["events"]
        await post(client, run_event("COMPLETE", run, "train", inputs=[data]))
        body = registration("1", training_run=run)
        registered = await admin.post("/models/churn/versions", content=body, headers=JSON)
        assert registered.status_code == 201, registered.text
        again = await admin.post("/models/churn/versions", content=body, headers=JSON)
        assert again.status_code == 200
        later = new_run()
        linked = await admin.post("/models/churn/versions/1/training-runs", json={"run_id": later})
        assert linked.status_code == 201, linked.text
        refused = await admin.post("/models/churn/versions/1/training-runs", json={"run_id": "x"})
        assert refused.status_code == 422
        assert refused.json()["errors"][0]["pointer"] == "#/body/run_id"
        await catch_up(app)
        model = (await client.get("/models/churn")).json()
        assert model["versions"][0]["training_runs"] == [run, later]
        answer = await ask(client, LINEAGE, id=external["id"])
        types = [n["event"]["type"] for n in answer["lineage"]["nodes"]]
        assert types == [
            "io.openlineage.dataset.version",
            "io.openlineage.run.complete",
            "causeway.model.trained",
        ]


SIZES = """
query ($namespace: String!, $name: String!) {
  dataset(namespace: $namespace, name: $name) { versions { rowCount sizeBytes } }
}
"""


async def test_a_dataset_over_2_gib_keeps_its_size(client: httpx2.AsyncClient) -> None:
    """Row counts and sizes past GraphQL's 32-bit Int (a 5 GB training set) are BigInt,
    not left out."""
    run = new_run()
    out = dataset("s3://lake", "features")
    stats = facet("OutputStatisticsOutputDatasetFacet", rowCount=3_000_000_000, size=5_000_000_000)
    event = run_event("COMPLETE", run, "train.features", outputs=[
        dict(out, outputFacets={"outputStatistics": stats})
    ])  # fmt: skip
    response = await client.post(
        "/api/v1/lineage", content=orjson.dumps(event), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 201, response.text
    answer = await ask(client, SIZES, namespace="s3://lake", name="features")
    [version] = answer["dataset"]["versions"]
    assert version == {"rowCount": 3_000_000_000, "sizeBytes": 5_000_000_000}


async def test_openlineage_gzip_under_a_path_prefix_is_still_inflated(
    app: FastAPI, make_key: MakeKey
) -> None:
    """The route inflates gzip itself, under a path prefix too (ASGI root_path, the path
    then holding it), where the refusal of coded bodies on other routes once took it."""
    key = await make_key("acme", "ingest,read")
    transport = httpx2.ASGITransport(app=app, root_path="/causeway")
    async with httpx2.AsyncClient(
        transport=transport,
        base_url="http://causeway",
        headers={"Authorization": f"Bearer {key}"},
    ) as client:
        plain = orjson.dumps(run_event("START", new_run(), "spark_app", producer=SPARK))
        sent = await client.post("/causeway/api/v1/lineage", content=plain, headers=JSON)
        assert sent.status_code == 201, sent.text  # the route answers under the prefix
        body = orjson.dumps(run_event("START", new_run(), "spark_app", producer=SPARK))
        coded = await client.post(
            "/causeway/api/v1/lineage",
            content=gzip.compress(body),
            headers={**JSON, "Content-Encoding": "gzip"},
        )
        assert coded.status_code == 201, coded.text
