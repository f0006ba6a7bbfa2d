"""A page of events reads their data, binary data and extensions only when the query asks
for one of them, anywhere below the page (fragments too). It read whole rows for every
page: ``events(first: 500) { edges { node { id } } }`` over events of 1 MiB held 500 MiB
for an answer of a few kilobytes, under an answer budget of 128 MiB."""

from __future__ import annotations

import base64
import tracemalloc
from typing import Any

import httpx2
import pytest
from sqlalchemy import URL

from tests.integration.app.graphql.workflow import ask, limited
from tests.integration.conftest import MakeKey
from tests.integration.events import STRUCTURED, dumps, event

EVENTS = 24
BUDGET = 4 << 20


async def test_a_page_of_ids_does_not_hold_every_event_s_data(
    database_url: URL, make_key: MakeKey
) -> None:
    async with limited(database_url, make_key, graphql_max_answer_bytes=BUDGET) as client:
        for _ in range(EVENTS):
            posted = await client.post(
                "/events", content=dumps(event(data={"blob": "x" * 1_000_000})), headers=STRUCTURED
            )
            assert posted.status_code == 201, posted.text
        query = f"{{ events(first: {EVENTS}) {{ edges {{ node {{ id }} }} }} }}"
        await ask(client, query)  # warm: caches, the schema, connections
        tracemalloc.start()
        try:
            answer = await ask(client, query)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert "errors" not in answer, answer
    assert len(answer["data"]["events"]["edges"]) == EVENTS
    assert peak <= 4 * BUDGET, f"a page of {EVENTS} ids held {peak:,} bytes at its peak"


async def _stored(client: httpx2.AsyncClient) -> None:
    sent = [
        event(id="json", stream="s", data={"a": 1}, comexample="x"),
        event(id="binary", stream="s", datacontenttype="application/octet-stream", data=...,
              data_base64=base64.b64encode(b"\x00\x01").decode()),
    ]  # fmt: skip
    for one in sent:
        posted = await client.post("/events", content=dumps(one), headers=STRUCTURED)
        assert posted.status_code == 201, posted.text


def _nodes(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    assert "errors" not in answer, answer
    return {e["node"]["id"]: e["node"] for e in answer["data"]["page"]["edges"]}


async def test_content_asked_for_through_fragments_is_read(
    database_url: URL, make_key: MakeKey
) -> None:
    async with limited(database_url, make_key) as client:
        await _stored(client)
        spread = await ask(
            client,
            '{ page: stream(id: "s") { edges { node { id ...F } } } }'
            " fragment F on Event { data dataBase64 }",
        )
        inline = await ask(
            client,
            "{ page: events { edges { node { id ... on Event { extensions } } } } }",
        )
        plain = await ask(client, '{ page: correlation(id: "run") { edges { node { id } } } }')
    found = _nodes(spread)
    assert found["json"]["data"] == {"a": 1}
    assert found["binary"]["dataBase64"] == base64.b64encode(b"\x00\x01").decode()
    assert _nodes(inline)["json"]["extensions"]["comexample"] == "x"
    assert plain["data"]["page"]["edges"] == []


@pytest.mark.parametrize(
    "query",
    [
        f'{{ event(id: "root") {{ effects(first: {EVENTS}) {{ edges {{ node {{ id }} }} }} }} }}',
        '{ event(id: "sink") { causes { id } } }',
    ],
    ids=["effects", "causes"],
)
async def test_ids_of_large_causes_and_effects_do_not_hold_their_data(
    database_url: URL, make_key: MakeKey, query: str
) -> None:
    """The same for an event's effects and causes, which read whole rows still."""
    async with limited(database_url, make_key, graphql_max_answer_bytes=BUDGET) as client:
        posted = await client.post("/events", content=dumps(event(id="root")), headers=STRUCTURED)
        assert posted.status_code == 201, posted.text
        ids = [f"big-{n}" for n in range(EVENTS)]
        for one in ids:
            big = event(id=one, causationid="root", data={"blob": "x" * 1_000_000})
            posted = await client.post("/events", content=dumps(big), headers=STRUCTURED)
            assert posted.status_code == 201, posted.text
        sink = event(id="sink", causationid=",".join(ids))
        assert (await client.post("/events", content=dumps(sink), headers=STRUCTURED)).is_success
        await ask(client, query)  # warm: caches, the schema, connections
        tracemalloc.start()
        try:
            answer = await ask(client, query)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert "errors" not in answer, answer
    assert peak <= 4 * BUDGET, f"{EVENTS} ids held {peak:,} bytes at their peak"


async def test_content_of_causes_and_effects_is_read_when_asked(
    database_url: URL, make_key: MakeKey
) -> None:
    async with limited(database_url, make_key) as client:
        await _stored(client)
        effect = event(id="effect", causationid="json,binary", data={"b": 2})
        assert (await client.post("/events", content=dumps(effect), headers=STRUCTURED)).is_success
        causes = await ask(
            client, '{ event(id: "effect") { causes { id ...F } } } fragment F on Event { data }'
        )
        effects = await ask(
            client,
            '{ event(id: "json") { effects { edges { node { id extensions data } } } }'
            '  plain: event(id: "binary") { effects { edges { node { id } } } } }',
        )
    assert "errors" not in causes, causes
    assert [c["data"] for c in causes["data"]["event"]["causes"]] == [{"a": 1}, None]
    assert "errors" not in effects, effects
    [node] = [e["node"] for e in effects["data"]["event"]["effects"]["edges"]]
    assert node["data"] == {"b": 2}
    assert effects["data"]["plain"]["effects"]["edges"] == [{"node": {"id": "effect"}}]
