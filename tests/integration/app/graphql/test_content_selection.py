"""Causes, effects and pages read an event's data, dataBase64 and extensions only when the
selection asks for them (types.asks_for_content): asked through an alias, an inline
fragment, a fragment spread or a directive with a variable, they are read."""

from __future__ import annotations

import uuid
from typing import Any

import httpx2
import pytest

from tests.integration.events import BATCH, dumps
from tests.integration.events import event as cloudevent


async def store(client: httpx2.AsyncClient) -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    a, b = f"a-{tag}", f"b-{tag}"
    batch = [
        cloudevent(id=a, data={"frame": 7}, camera="north"),
        cloudevent(id=b, data={"frame": 8}, causationid=a),
    ]
    r = await client.post("/events", content=dumps(batch), headers=BATCH)
    assert r.status_code in (200, 201), r.text
    return a, b


async def ask(client: httpx2.AsyncClient, query: str, **variables: Any) -> Any:
    body = (await client.post("/graphql", json={"query": query, "variables": variables})).json()
    assert body.get("errors") is None, body
    return body["data"]


@pytest.mark.parametrize(
    "selection",
    [
        "causes { d: data }",
        "causes { ... on Event { data } }",
        "causes { ... { data } }",
        "causes { ...F }",
        "causes { ...G }",
        "causes { data @include(if: $x) }",
        "causes { data @skip(if: $y) }",
        "causes { ...F @include(if: $x) }",
        "causes { ... @include(if: $x) { data } }",
        "causes { id } causes { data }",
        "causes { data @skip(if: $x) } causes { data }",
    ],
)
async def test_cause_content_loaded_however_asked(
    client: httpx2.AsyncClient, selection: str
) -> None:
    _a, b = await store(client)
    decl = (
        "$id: ID!"
        + (", $x: Boolean!" if "$x" in selection else "")
        + (", $y: Boolean!" if "$y" in selection else "")
    )
    query = f"query ({decl}) {{ event(id: $id) {{ {selection} }} }}"
    if "...F" in selection or "...G" in selection:
        query += " fragment F on Event { data }"
    if "...G" in selection:
        query += " fragment G on Event { ...F }"
    variables: dict[str, Any] = {"id": b}
    if "$x" in selection:
        variables["x"] = True
    if "$y" in selection:
        variables["y"] = False
    found = await ask(client, query, **variables)
    causes = found["event"]["causes"]
    assert causes, found
    assert all((c.get("data") or c.get("d")) == {"frame": 7} for c in causes), found


@pytest.mark.parametrize(
    "selection",
    [
        "edges { node { ext: extensions } }",
        "edges { node { ... on Event { extensions } } }",
        "edges { node { extensions @include(if: $x) } }",
    ],
)
async def test_effects_extensions_loaded_however_asked(
    client: httpx2.AsyncClient, selection: str
) -> None:
    a, b = await store(client)
    decl = "$id: ID!" + (", $x: Boolean!" if "$x" in selection else "")
    query = f"query ({decl}) {{ event(id: $id) {{ effects {{ {selection} }} }} }}"
    variables: dict[str, Any] = {"id": a}
    if "$x" in selection:
        variables["x"] = True
    found = await ask(client, query, **variables)
    found2 = await ask(
        client,
        "query ($id: ID!) { event(id: $id) { causes { extensions } } }",
        id=b,
    )
    assert found2["event"]["causes"][0]["extensions"] == {"camera": "north"}
    # the effect (b) has no extension; check the value is an object, not null
    node = found["event"]["effects"]["edges"][0]["node"]
    assert (node.get("extensions") if "ext:" not in selection else node.get("ext")) == {}, found


async def test_events_page_data_through_variable_include(client: httpx2.AsyncClient) -> None:
    a, _b = await store(client)
    query = (
        "query ($x: Boolean!, $s: String!) { events(filter: {source: $s}, first: 500) "
        "{ edges { node { id data @include(if: $x) } } } }"
    )
    found = await ask(client, query, x=True, s="/cameras/gate")
    nodes = {e["node"]["id"]: e["node"] for e in found["events"]["edges"]}
    assert nodes[a]["data"] == {"frame": 7}


async def test_variable_with_default_directive(client: httpx2.AsyncClient) -> None:
    _a, b = await store(client)
    query = (
        "query ($id: ID!, $x: Boolean = true) { event(id: $id) "
        "{ causes { data @include(if: $x) } } }"
    )
    found = await ask(client, query, id=b)
    assert found["event"]["causes"] == [{"data": {"frame": 7}}]
