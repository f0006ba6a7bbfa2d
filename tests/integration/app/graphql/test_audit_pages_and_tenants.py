"""Pages of effects and of a workflow run, with events arriving between pages; audits
of two tenants whose events share ids; audits cut by the node cap."""

from __future__ import annotations

from typing import Any

import httpx2
from fastapi import FastAPI
from sqlalchemy import URL

from tests.integration.app.graphql.workflow import limited
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import BATCH, dumps
from tests.integration.events import event as cloudevent

EFFECTS = """
query ($after: String) {
  event(id: "root") {
    effects(first: 3, after: $after) {
      edges { node { id } }
      pageInfo { hasNextPage hasPreviousPage endCursor }
    }
  }
}
"""
RUN = """
query ($after: String) {
  correlation(id: "run-1", first: 3, after: $after) {
    edges { node { id } }
    pageInfo { hasNextPage endCursor }
  }
}
"""
AUDIT = """
query ($id: ID!) {
  audit(decisionId: $id) {
    sourceEvents { id position }
    derivedEvents { id position }
    models { name version signatureDigest events { id } }
    graph { nodes { depth event { id } } }
    trainingEvents { id }
    chainVerified
    truncated
  }
}
"""


async def ask(client: httpx2.AsyncClient, query: str, **variables: Any) -> dict[str, Any]:
    response = await client.post("/graphql", json={"query": query, "variables": variables})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert "errors" not in body, body
    data: dict[str, Any] = body["data"]
    return data


async def post(client: httpx2.AsyncClient, *events: dict[str, Any]) -> None:
    response = await client.post("/events", content=dumps(list(events)), headers=BATCH)
    assert response.status_code == 201, response.text


async def test_pages_of_effects_and_of_a_run_see_each_event_once_as_more_arrive(
    client: httpx2.AsyncClient,
) -> None:
    await post(client, cloudevent(id="root", correlationid="run-1"))
    await post(
        client,
        *[cloudevent(id=f"fx-{n}", causationid="root", correlationid="run-1") for n in range(5)],
    )
    for query, field in ((EFFECTS, "event"), (RUN, "correlation")):
        seen: list[str] = []
        after = None
        added = 0
        while True:
            found = (await ask(client, query, after=after))[field]
            page = found["effects"] if field == "event" else found
            seen += [e["node"]["id"] for e in page["edges"]]
            if not page["pageInfo"]["hasNextPage"]:
                break
            if added < 3:  # more arrive between pages: interleaved with other events
                await post(
                    client,
                    cloudevent(
                        id=f"{field}-late-{added}", causationid="root", correlationid="run-1"
                    ),
                    cloudevent(id=f"{field}-other-{added}"),
                )
                added += 1
            after = page["pageInfo"]["endCursor"]
        assert len(seen) == len(set(seen)), seen
        everything = (await ask(client, query.replace("first: 3", "first: 500")))[field]
        whole = everything["effects"] if field == "event" else everything
        assert seen == [e["node"]["id"] for e in whole["edges"]]


async def test_an_audit_shows_only_its_tenants_events_where_ids_are_shared(
    app: FastAPI, make_key: MakeKey, client: httpx2.AsyncClient, register: Any
) -> None:
    await register("m", "1")
    async with asgi_client(app, await make_key("clinic-b", "ingest,read,admin")) as other:
        # The other tenant: the same ids, a longer graph, another model of the same name.
        response = await other.post(
            "/models/m/versions",
            content=dumps({"version": "9", "signature": {"inputs": [{"type": "string"}]}}),
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 201, response.text
        theirs = [cloudevent(id=f"x-{n}") for n in range(30)]
        theirs += [
            cloudevent(id="src"),
            cloudevent(
                id="mid",
                causationid=",".join(["src", *[f"x-{n}" for n in range(30)]]),
                modelname="m",
                modelversion="9",
            ),
            cloudevent(id="dx", causationid="mid"),
        ]
        await post(other, *theirs)
        mine = [
            cloudevent(id="src"),
            cloudevent(id="mid", causationid="src", modelname="m", modelversion="1"),
            cloudevent(id="dx", causationid="mid"),
        ]
        await post(client, *mine)
        answer = (await ask(client, AUDIT, id="dx"))["audit"]
        assert {e["id"] for e in answer["sourceEvents"]} == {"src"}
        assert [m["version"] for m in answer["models"]] == ["1"]
        assert len(answer["graph"]["nodes"]) == 3
        assert answer["truncated"] is False
        assert answer["chainVerified"] is True
        theirs_answer = (await ask(other, AUDIT, id="dx"))["audit"]
        assert len(theirs_answer["sourceEvents"]) == 31
        assert [m["version"] for m in theirs_answer["models"]] == ["9"]
        ours = {e["position"] for e in answer["sourceEvents"] + answer["derivedEvents"]}
        theirs_positions = {
            e["position"] for e in theirs_answer["sourceEvents"] + theirs_answer["derivedEvents"]
        }
        assert not ours & theirs_positions


async def test_an_audit_cut_by_the_node_cap_says_truncated_and_still_verifies(
    database_url: URL, make_key: MakeKey
) -> None:
    async with limited(database_url, make_key, graphql_max_lineage_nodes=4) as client:
        await post(
            client,
            cloudevent(id="a"),
            cloudevent(id="b"),
            cloudevent(id="c", causationid="a,b"),
            cloudevent(id="d", causationid="c"),
        )
        whole = (await ask(client, AUDIT, id="d"))["audit"]
        assert whole["truncated"] is False
        assert whole["chainVerified"] is True
        await post(client, cloudevent(id="e", causationid="d"))
        cut = (await ask(client, AUDIT, id="e"))["audit"]
        assert cut["truncated"] is True
        assert cut["chainVerified"] is True
        assert len(cut["graph"]["nodes"]) == 4
