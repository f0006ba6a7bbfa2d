"""What ``GET /replay`` is asked, as it reads it: the names it takes, and the position a
read must show (``Causeway-Min-Position``, ``min_position``), waited for once the rest is
known to be well formed and before a replay takes its slot; the header once at most, on
every read."""

from __future__ import annotations

import asyncio

import httpx2
import orjson
import pytest
from fastapi import FastAPI

from app.api.replay import REPLAY_PARAMETERS
from app.settings import Settings
from app.web.reads import ReadRouter, ReadSource
from tests.integration.events import BATCH, dumps, event


@pytest.fixture
def settings() -> Settings:
    # A short wait for a position (the tests below name one the log never reaches), and
    # one replay at a time.
    return Settings(_env_file=None, read_wait_ms=1000, replay_max_streams=1)


@pytest.mark.parametrize(
    "misnamed",
    [{"correlation_id": "run-1"}, {"correlationId": "run-1"}, {"type": "run.v1"}],
    ids=["snake-case", "graphql-case", "type-singular"],
)
async def test_a_misnamed_filter_is_refused_not_ignored(
    client: httpx2.AsyncClient, misnamed: dict[str, str]
) -> None:
    """GraphQL filters by ``correlationId`` and ``POST /events`` answers ``stream_version``:
    ``/replay?correlation_id=run-1`` ignored the name and answered every event of the
    tenant, a whole log exported as one run's."""
    sent = [event(correlationid="run-1", type="run.v1"), event(correlationid="run-2")]
    assert (await client.post("/events", content=dumps(sent), headers=BATCH)).status_code == 201
    response = await client.get("/replay", params=misnamed)
    assert response.status_code == 400, response.text
    problem = response.json()
    [name] = misnamed
    assert problem["parameter"] == name
    assert "correlationid" in problem["detail"]


async def test_the_names_replay_takes_are_those_its_document_lists(
    client: httpx2.AsyncClient,
) -> None:
    document = (await client.get("/openapi.json")).json()
    parameters = document["paths"]["/replay"]["get"]["parameters"]
    assert {p["name"] for p in parameters if p["in"] == "query"} == REPLAY_PARAMETERS
    sent = [event(correlationid="run-1")]
    assert (await client.post("/events", content=dumps(sent), headers=BATCH)).status_code == 201
    every = {"after": "0", "types": "a.v1", "format": "ndjson", "limit": "5", "since": "2000-01-01T00:00:00Z",
              "until": "2100-01-01T00:00:00Z", "min_position": "1", "stream": "s", "source": "/s",
              "correlationid": "run-1", "modelname": "m", "modelversion": "1"}  # fmt: skip
    assert set(every) == REPLAY_PARAMETERS  # each of them is taken
    assert (await client.get("/replay", params=every)).status_code == 200


async def test_two_min_position_headers_are_refused(client: httpx2.AsyncClient) -> None:
    """FastAPI reads the first of several: a request naming a position the log has not
    reached in a second header was answered at once, older than that position."""
    written = await client.post("/events", content=dumps([event()]), headers=BATCH)
    assert written.headers["Causeway-Position"] == "1"
    headers = httpx2.Headers([("Causeway-Min-Position", "1"), ("Causeway-Min-Position", "999999")])
    for path in ("/replay", "/events/no-such-event", "/models", "/queues"):
        response = await client.get(path, headers=headers)
        assert response.status_code == 400, (path, response.text)
        assert "Causeway-Min-Position" in response.json()["detail"]
    asked = {"query": "{ __typename }"}
    response = await client.post("/graphql", json=asked, headers=headers)
    assert response.status_code == 400, response.text


@pytest.mark.parametrize(
    "params",
    [{"since": "yesterday"}, {"format": "xml"}, {"limit": "0"}, {"stream": ""}],
    ids=["bad-since", "bad-format", "zero-limit", "empty-stream"],
)
async def test_a_malformed_replay_naming_an_unreached_position_is_told_what_is_wrong(
    client: httpx2.AsyncClient, params: dict[str, str]
) -> None:
    """The position was waited for before the replay's own parameters were read: a request
    that can never succeed answered 503 with Retry-After after the whole wait, so a client
    that honours it retried for ever, never told what is wrong."""
    response = await client.get("/replay", params={**params, "min_position": "999999"})
    assert response.status_code in (400, 422), response.text
    assert "retry-after" not in response.headers
    unreached = await client.get("/replay", params={"min_position": "999999"})
    assert unreached.status_code == 503  # and a well-formed one still waits, then says so
    assert orjson.loads(unreached.content)["type"] == "/problems/unavailable"


async def test_a_replay_waiting_for_its_position_holds_no_slot(
    app: FastAPI, client: httpx2.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replays in flight are bounded (``CAUSEWAY_REPLAY_MAX_STREAMS``, one here): one
    waiting for a position the log has not reached takes no slot until it is there, so
    the process's other replays are not refused meanwhile."""
    assert (
        await client.post("/events", content=dumps([event()]), headers=BATCH)
    ).status_code == 201
    router: ReadRouter = app.state.read_router
    for_log = router.for_log
    in_wait = asyncio.Event()

    async def noting(min_position: int | None) -> ReadSource:
        if min_position is not None:
            in_wait.set()
        return await for_log(min_position)

    monkeypatch.setattr(router, "for_log", noting)
    waiting = asyncio.create_task(client.get("/replay", params={"min_position": "999999"}))
    await asyncio.wait_for(in_wait.wait(), 5)
    other = await client.get("/replay")
    assert not waiting.done()
    assert other.status_code == 200, other.text
    assert (await waiting).status_code == 503  # waited, then said so
