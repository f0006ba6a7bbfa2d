"""`dataset(...)` reads (and charges to the answer budget) the runs' events only when
`runs` is selected (types.asks_for over Strawberry's selected_fields). A `runs` switched
off by @include(if: false) or @skip(if: true), or a fragment that happens to be named
`runs`, still loaded and charged every run's events: the query was refused,
ANSWER_TOO_LARGE, for a dataset read by many runs."""

from __future__ import annotations

from typing import Any

import httpx2
import orjson
import pytest
from sqlalchemy import URL

from tests.integration.app.graphql.workflow import limited
from tests.integration.conftest import MakeKey
from tests.integration.events import JSON
from tests.integration.ingest.openlineage.shapes import dataset, new_run, run_event


async def post(client: httpx2.AsyncClient, sent: dict[str, Any]) -> None:
    r = await client.post("/api/v1/lineage", content=orjson.dumps(sent), headers=JSON)
    assert r.status_code == 201, r.text


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
    database_url: URL, make_key: MakeKey, query: str
) -> None:
    async with limited(database_url, make_key, graphql_max_answer_items=100) as client:
        for _ in range(40):
            run = new_run()
            for state in ("START", "RUNNING", "COMPLETE"):
                await post(
                    client,
                    run_event(state, run, "daily", inputs=[dataset("s3://lake", "payments")]),
                )
        r = "include" not in query  # false for @include, true for @skip
        answer = await client.post("/graphql", json={"query": query, "variables": {"r": r}})
        body = answer.json()
        assert body.get("errors") is None, body
        assert body["data"]["dataset"] == {"name": "payments"}


async def test_a_fragment_named_runs_is_no_runs_field(database_url: URL, make_key: MakeKey) -> None:
    """asks_for matches `name` of every selection, and a FragmentSpread's name is the
    fragment's: `...runs` selecting only `name` loads and charges every run's events."""
    query = (
        'query { dataset(namespace: "s3://lake", name: "payments") { ...runs } } '
        "fragment runs on Dataset { name }"
    )
    async with limited(database_url, make_key, graphql_max_answer_items=100) as client:
        for _ in range(40):
            run = new_run()
            for state in ("START", "RUNNING", "COMPLETE"):
                await post(
                    client,
                    run_event(state, run, "daily", inputs=[dataset("s3://lake", "payments")]),
                )
        body = (await client.post("/graphql", json={"query": query})).json()
        assert body.get("errors") is None, body
        assert body["data"]["dataset"] == {"name": "payments"}
