"""Replay's parameters as a user gives them: a filter that takes one value given twice,
a type named many times, events without a time, and fetches of text that is not ASCII."""

from __future__ import annotations

import io
from typing import Any

import httpx2
import orjson
import pyarrow.parquet as pq
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.store import reads
from app.store.log import EventLog
from app.store.reads import EventReader
from app.store.records import EventFilter, NewEvent
from tests.integration.events import BATCH, dumps, event


def ids(response: httpx2.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [orjson.loads(line)["id"] for line in response.text.splitlines()]


@pytest.mark.parametrize("name", ["correlationid", "stream", "modelversion", "since", "after"])
async def test_a_parameter_of_one_value_given_twice_is_refused(
    client: httpx2.AsyncClient, name: str
) -> None:
    """It kept the last: a training export of two runs silently held one run."""
    sent = [event(correlationid="run-1"), event(correlationid="run-2")]
    assert (await client.post("/events", content=dumps(sent), headers=BATCH)).status_code == 201
    values = {"since": ["2026-01-01T00:00:00Z"] * 2, "after": ["0", "1"]}
    response = await client.get("/replay", params={name: values.get(name, ["run-1", "run-2"])})
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["detail"].startswith(f"{name} is given 2 times")


@pytest.mark.parametrize(
    "path",
    [
        "/deployments/gate?at=2000-01-01T00:00:00Z&at=2999-01-01T00:00:00Z",
        "/dead-letters?queue=a&queue=b",
        "/streams/s?limit=1&limit=2",
    ],
)
async def test_any_query_parameter_of_one_value_given_twice_is_refused(
    client: httpx2.AsyncClient, path: str
) -> None:
    """/deployments/gate?at=(2000)&at=(2999) answered the state at 2999 as the state at
    2000: the last value won, as on /replay."""
    response = await client.get(path)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "is given 2 times: it takes one value" in response.json()["detail"]


async def test_a_type_named_many_times_is_one_type(client: httpx2.AsyncClient) -> None:
    """The cap of 100 types counted the names as given: one type named 101 times (a
    script that adds a type per input file) was refused."""
    sent = [event(type="a.v1"), event(type="b.v1")]
    assert (await client.post("/events", content=dumps(sent), headers=BATCH)).status_code == 201
    response = await client.get("/replay", params={"types": ["a.v1"] * 101})
    assert ids(response) == [sent[0]["id"]]
    distinct = await client.get("/replay", params={"types": [f"t{n}.v1" for n in range(101)]})
    assert distinct.status_code == 400, distinct.text  # the documented cap: 100 types
    # Named as every other problem of /replay names what was wrong: its parameter (a
    # GraphQL field's problem says "argument").
    assert distinct.json().get("parameter") == "types", distinct.json()


@pytest.mark.parametrize("types", ["\x1f", " ,\x1c"])
async def test_a_types_naming_no_type_is_a_422(client: httpx2.AsyncClient, types: str) -> None:
    """U+001C-U+001F are whitespace to the trimming, not to the pattern: it was a 400."""
    response = await client.get("/replay", params={"types": types})
    assert response.status_code == 422, response.text


async def test_an_event_without_a_time_comes_only_without_time_bounds(
    client: httpx2.AsyncClient,
) -> None:
    sent = [event(time="2026-01-01T00:00:00Z"), event(), event(time="2026-01-03T00:00:00Z")]
    assert (await client.post("/events", content=dumps(sent), headers=BATCH)).status_code == 201
    bound = "2026-01-02T00:00:00Z"
    assert ids(await client.get("/replay", params={"until": bound})) == [sent[0]["id"]]
    assert ids(await client.get("/replay", params={"since": bound})) == [sent[2]["id"]]
    assert ids(await client.get("/replay")) == [e["id"] for e in sent]


@pytest.mark.parametrize("form", ["ndjson", "parquet"])
async def test_a_fetch_of_text_past_ascii_holds_about_fetch_bytes(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    """Fetches were sized by characters: 4,000 emoji (16 kB of UTF-8) counted as 4 kB,
    so a fetch held four times ``FETCH_BYTES``."""
    monkeypatch.setattr(reads, "FIRST_FETCH_ROWS", 1)
    monkeypatch.setattr(reads, "FETCH_BYTES", 20_000)
    large = [
        NewEvent(id=f"l{i}", source="/s", type="t", stream="l", has_data=True, data="😀" * 4000)
        for i in range(30)
    ]
    async with engine.begin() as conn:
        await EventLog(conn).append("acme", large)
    async with engine.connect() as conn:
        reader = EventReader(conn)
        if form == "ndjson":
            chunks = reader.replay("acme", EventFilter(), fetch_rows=1000)
            held = [len(chunk.text.encode()) async for chunk in chunks]
        else:
            fetches = reader.replay_rows("acme", EventFilter(), fetch_rows=1000)
            held = [sum(len(row[12].encode()) for row in rows) async for rows in fetches]
    assert sum(held) > 30 * 16_000
    assert max(held) <= 2 * 20_000, held


async def test_a_model_filter_gives_what_the_model_produced_not_the_stores_own_events(
    client: httpx2.AsyncClient, admin: httpx2.AsyncClient, register: Any
) -> None:
    """From a review: ``modelname``/``modelversion`` gave the version's registration and
    its rollout too (the store's own events name the model), rows of another shape in
    training data built from what the model produced. ``types`` still asks for them."""
    await register("m", "1")
    rollout = await admin.post(
        "/deployments/svc/rollouts",
        content=dumps({"model": "m", "version": "1", "reason": "first"}),
        headers={"Content-Type": "application/json"},
    )
    assert rollout.status_code == 200, rollout.text
    produced = [event(modelname="m", modelversion="1", data={"score": 0.5}) for _ in range(2)]
    assert (await client.post("/events", content=dumps(produced), headers=BATCH)).status_code == 201
    for form in ("ndjson", "parquet"):
        replay = await client.get(
            "/replay", params={"modelname": "m", "modelversion": "1", "format": form}
        )
        assert replay.status_code == 200, replay.text
        if form == "ndjson":
            types = [orjson.loads(line)["type"] for line in replay.text.split("\n")[:-1]]
        else:
            types = pq.read_table(io.BytesIO(replay.content)).column("type").to_pylist()
        assert types == ["com.example.frame.v1"] * 2, (form, types)
    asked = await client.get(
        "/replay", params={"modelname": "m", "types": "causeway.model.registered"}
    )
    assert [orjson.loads(line)["type"] for line in asked.text.split("\n")[:-1]] == [
        "causeway.model.registered"
    ]
    page = await client.post(
        "/graphql",
        json={"query": '{ events(filter: {modelName: "m"}) { edges { node { type } } } }'},
    )
    nodes = page.json()["data"]["events"]["edges"]
    assert [n["node"]["type"] for n in nodes] == ["com.example.frame.v1"] * 2, page.text
