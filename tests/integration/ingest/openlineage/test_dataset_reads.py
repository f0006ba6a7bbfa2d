"""GraphQL's `dataset`, from a review:
- it read the dataset's events, then in another statement (GraphQL's reads autocommit:
  each statement its own snapshot) the run events they caused; a run that read the
  dataset and committed between the two was a cause the first read never saw, and the
  answer was INTERNAL "Unexpected error." instead of the dataset;
- it loaded and charged to the answer budget every event of every run that read or
  wrote a version, whatever the query selected: a dataset read by many runs could not
  be asked even for its name (ANSWER_TOO_LARGE);
- `readByRunIds` took any event of an `io.openlineage.run.*` type caused by a version
  for a run, and its stream for a run id: a client's own CloudEvent of such a type (only
  `causeway.*` is reserved) was listed as the run `my-stream`;
- whether `runs` was selected was judged by the name of every selection: a `runs`
  switched off by @include(if: false) or @skip(if: true), or a fragment that happened to
  be named `runs`, still loaded and charged every run's events (types.asks_for)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2
import orjson
import pytest
from sqlalchemy import URL

import app.graphql.schema as schema_module
from app.store.openlineage import read_dataset as real_read_dataset
from tests.integration.app.graphql.workflow import limited
from tests.integration.conftest import MakeKey
from tests.integration.events import JSON, STRUCTURED, dumps, event
from tests.integration.ingest.openlineage.shapes import dataset, new_run, run_event

RACE_QUERY = """
query { dataset(namespace: "s3://lake", name: "t") { versions { external readByRunIds } } }
"""
NAME_ONLY = """
query { dataset(namespace: "s3://lake", name: "payments") { namespace name } }
"""
LAST_VERSION_ONLY = """
query { dataset(namespace: "s3://lake", name: "payments") { versions { version } } }
"""
READERS_QUERY = """
query { dataset(namespace: "s3://lake", name: "t") { versions { readByRunIds } runs { runId } } }
"""


async def post(client: httpx2.AsyncClient, sent: dict[str, Any]) -> None:
    r = await client.post("/api/v1/lineage", content=orjson.dumps(sent), headers=JSON)
    assert r.status_code == 201, r.text


class _Between:
    """A connection that runs ``between`` once, after its first statement."""

    def __init__(self, conn: Any, between: Any) -> None:
        self._conn, self._between, self._calls = conn, between, 0

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        result = await self._conn.execute(*args, **kwargs)
        self._calls += 1
        if self._calls == 1:
            await self._between()
        return result


async def test_a_run_that_commits_during_the_read_does_not_break_it(
    client: httpx2.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A DatasetEvent first: the dataset is in the log, with no version yet.
    await post(
        client,
        {
            "eventTime": "2026-11-02T10:00:00.000Z",
            "producer": "https://catalog",
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/DatasetEvent",
            "dataset": {"namespace": "s3://lake", "name": "t", "facets": {}},
        },
    )
    reader = new_run()

    async def a_run_reads_it() -> None:  # another client, meanwhile
        await post(client, run_event("COMPLETE", reader, "j", inputs=[dataset("s3://lake", "t")]))

    async def read_dataset(conn: Any, *args: Any) -> Any:
        between: Any = _Between(conn, a_run_reads_it)  # the connection, one step added
        return await real_read_dataset(between, *args)

    monkeypatch.setattr(schema_module, "read_dataset", read_dataset)
    body = (await client.post("/graphql", json={"query": RACE_QUERY})).json()
    assert body.get("errors") is None, body


@pytest.fixture
async def read_by_forty_runs(
    database_url: URL, make_key: MakeKey
) -> AsyncIterator[httpx2.AsyncClient]:
    """A server whose answers hold at most 100 items, and 40 daily runs that read one
    source table: START, RUNNING, COMPLETE each (120 run events, 1 version)."""
    async with limited(database_url, make_key, graphql_max_answer_items=100) as client:
        for _ in range(40):
            run = new_run()
            for state in ("START", "RUNNING", "COMPLETE"):
                await post(
                    client,
                    run_event(state, run, "daily", inputs=[dataset("s3://lake", "payments")]),
                )
        yield client


async def test_a_dataset_read_by_many_runs_answers_its_name(
    read_by_forty_runs: httpx2.AsyncClient,
) -> None:
    client = read_by_forty_runs  # the query asks for two strings
    body = (await client.post("/graphql", json={"query": NAME_ONLY})).json()
    assert body.get("errors") is None, body
    assert body["data"]["dataset"] == {"namespace": "s3://lake", "name": "payments"}
    body = (await client.post("/graphql", json={"query": LAST_VERSION_ONLY})).json()
    assert body.get("errors") is None, body
    assert len(body["data"]["dataset"]["versions"]) == 1


@pytest.mark.parametrize(
    "query",
    [
        # A client's optional section, switched off: no runs are in the answer.
        'query ($r: Boolean!) { dataset(namespace: "s3://lake", name: "payments") '
        "{ name runs @include(if: $r) { runId } } }",
        'query ($r: Boolean!) { dataset(namespace: "s3://lake", name: "payments") '
        "{ name runs @skip(if: $r) { runId } } }",
    ],
    ids=["include-false", "skip-true"],
)
async def test_runs_switched_off_by_a_directive_are_not_loaded_nor_charged(
    read_by_forty_runs: httpx2.AsyncClient, query: str
) -> None:
    r = "include" not in query  # false for @include, true for @skip
    answer = await read_by_forty_runs.post("/graphql", json={"query": query, "variables": {"r": r}})
    body = answer.json()
    assert body.get("errors") is None, body
    assert body["data"]["dataset"] == {"name": "payments"}


async def test_a_fragment_named_runs_is_no_runs_field(
    read_by_forty_runs: httpx2.AsyncClient,
) -> None:
    """A FragmentSpread's name is the fragment's: `...runs` selecting only `name`."""
    query = (
        'query { dataset(namespace: "s3://lake", name: "payments") { ...runs } } '
        "fragment runs on Dataset { name }"
    )
    body = (await read_by_forty_runs.post("/graphql", json={"query": query})).json()
    assert body.get("errors") is None, body
    assert body["data"]["dataset"] == {"name": "payments"}


async def test_a_cloudevent_on_another_stream_is_no_reading_run(
    client: httpx2.AsyncClient,
) -> None:
    run = new_run()
    written = run_event("COMPLETE", run, "j", outputs=[dataset("s3://lake", "t")])
    r = await client.post("/api/v1/lineage", content=orjson.dumps(written), headers=JSON)
    assert r.status_code == 201, r.text
    [version] = [e["id"] for e in r.json()["events"] if e["id"].startswith("openlineage:version:")]
    sent = event(type="io.openlineage.run.complete", stream="my-stream", causationid=version)
    posted = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
    assert posted.status_code == 201, posted.text
    body = (await client.post("/graphql", json={"query": READERS_QUERY})).json()
    found = body["data"]["dataset"]
    assert found["runs"] == [{"runId": run}], body
    assert found["versions"][0]["readByRunIds"] == [], body
