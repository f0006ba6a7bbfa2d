"""An empty stream or correlation id names nothing a store can hold (ingest refuses
both), so every other face refuses it as a value gone missing: ``GET /replay?stream=``
and ``?correlationid=`` (422), ``GET /streams/`` (422), and GraphQL's own
``events(filter: {stream: "", correlationId: ""})`` (BAD_REQUEST, ``refuse_empty_filters``).
GraphQL's ``stream(id: "")`` and ``correlation(id: "")`` too: they answered an empty
page, and a client whose variable went missing read "this run has no events"; and
``event(id: "")``, ``lineage(id: "")`` and ``audit(decisionId: "")``, as ``GET /events/``
(422): the first answered null, as for an event not stored."""

from __future__ import annotations

import httpx2
import pytest

from tests.integration.events import BATCH, dumps, event


@pytest.mark.parametrize(
    ("field", "rest_path", "rest_params", "filter_name"),
    [
        ("stream", "/replay", {"stream": ""}, "stream"),
        ("correlation", "/replay", {"correlationid": ""}, "correlationId"),
    ],
)
async def test_an_empty_id_is_refused_by_graphql_as_by_rest(
    client: httpx2.AsyncClient,
    field: str,
    rest_path: str,
    rest_params: dict[str, str],
    filter_name: str,
) -> None:
    posted = await client.post(
        "/events", content=dumps([event(stream="s", correlationid="run-1")]), headers=BATCH
    )
    assert posted.status_code == 201, posted.text

    rest = await client.get(rest_path, params=rest_params)
    assert rest.status_code == 422
    assert rest.headers["content-type"].startswith("application/problem+json")

    as_filter = await client.post(
        "/graphql",
        json={
            "query": f'{{ events(filter: {{{filter_name}: ""}}) {{ edges {{ node {{ id }} }} }} }}'
        },
    )
    [refused] = as_filter.json()["errors"]
    assert refused["extensions"]["code"] == "BAD_REQUEST"

    direct = await client.post(
        "/graphql",
        json={
            "query": f"query($id: String!) {{ {field}(id: $id) {{ edges {{ node {{ id }} }} }} }}",
            "variables": {"id": ""},
        },
    )
    answer = direct.json()
    assert "errors" in answer, f'{field}(id: "") answered {answer} (an empty page, no error)'
    assert answer["errors"][0]["extensions"]["code"] == "BAD_REQUEST"


@pytest.mark.parametrize(
    "query",
    [
        "query($id: ID!) { event(id: $id) { id } }",
        "query($id: ID!) { lineage(id: $id) { truncated } }",
        "query($id: ID!) { audit(decisionId: $id) { truncated } }",
    ],
    ids=["event", "lineage", "audit"],
)
async def test_an_empty_event_id_is_refused_by_graphql_as_by_rest(
    client: httpx2.AsyncClient, query: str
) -> None:
    assert (await client.get("/events/")).status_code == 422
    answer = (await client.post("/graphql", json={"query": query, "variables": {"id": ""}})).json()
    assert answer["errors"][0]["extensions"]["code"] == "BAD_REQUEST", answer
