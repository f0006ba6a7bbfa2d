"""Reads, replay and tenant isolation over HTTP."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import orjson
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from app.main import create_app, dispose
from app.settings import Settings
from tests.in_process import serving
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import BATCH, STRUCTURED, dumps, event

DAY2, DAY3 = "2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"


def lines(response: httpx2.Response) -> list[dict[str, Any]]:
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [orjson.loads(line) for line in response.text.splitlines()]


@pytest.fixture
async def other_tenant(app: FastAPI, make_key: MakeKey) -> Any:
    key = await make_key("globex", "ingest,read")
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(
        transport=transport, base_url="http://c", headers={"Authorization": f"Bearer {key}"}
    ) as client:
        yield client


class TestStreams:
    async def test_a_stream_reads_in_version_order_from_a_version(
        self, client: httpx2.AsyncClient
    ) -> None:
        batch = [event(stream="orders"), event(stream="other"), event(stream="orders")]
        batch.append(event(stream="orders"))
        await client.post("/events", content=dumps(batch), headers=BATCH)
        response = await client.get("/streams/orders", params={"from_version": 2, "limit": 5})
        assert [e["streamversion"] for e in response.json()] == [2, 3]
        assert [e["id"] for e in response.json()] == [batch[2]["id"], batch[3]["id"]]

    async def test_an_unknown_stream_is_404(self, client: httpx2.AsyncClient) -> None:
        response = await client.get("/streams/nothing-here")
        assert response.status_code == 404
        assert response.json()["type"] == "/problems/not-found"

    async def test_an_unknown_event_is_404(self, client: httpx2.AsyncClient) -> None:
        assert (await client.get("/events/missing")).status_code == 404

    async def test_an_event_and_a_stream_answer_compact_json_as_every_endpoint(
        self, client: httpx2.AsyncClient
    ) -> None:
        sent = event(
            stream="notes",
            data={"text": 'a "quoted" word, then: a colon \\', "n": [1, 2.5, 1e3], "ok": True},
        )
        await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        one = await client.get(f"/events/{sent['id']}")
        stream = await client.get("/streams/notes")
        for answer in (one.text, stream.text):
            assert answer == orjson.dumps(orjson.loads(answer)).decode()
        assert one.json()["data"] == sent["data"]


class TestReplay:
    @pytest.fixture
    async def stored(self, client: httpx2.AsyncClient, register: Any) -> list[dict[str, Any]]:
        await register("m", "1", "2")
        batch = [
            event(type="a.v1", correlationid="run-1", time="2026-01-01T00:00:00Z"),
            event(
                type="b.v1",
                correlationid="run-1",
                modelname="m",
                modelversion="1",
                time="2026-01-02T00:00:00Z",
            ),
            event(
                type="a.v1",
                correlationid="run-2",
                modelname="m",
                modelversion="2",
                time="2026-01-03T00:00:00Z",
                source="/other",
            ),
            event(type="c.v1", stream="special", time="2026-01-04T00:00:00.5Z"),
        ]
        await client.post("/events", content=dumps(batch), headers=BATCH)
        return batch

    @pytest.mark.parametrize(
        ("params", "expected"),
        [
            ({}, [0, 1, 2, 3]),
            ({"types": "a.v1,c.v1"}, [0, 2, 3]),
            ({"correlationid": "run-1"}, [0, 1]),
            ({"modelname": "m"}, [1, 2]),
            ({"modelname": "m", "modelversion": "2"}, [2]),
            ({"source": "/other"}, [2]),
            ({"stream": "special"}, [3]),
            ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-04T00:00:00.5Z"}, [1, 2]),
            ({"after": 4}, [2, 3]),  # positions 1 and 2 are the model registrations
            ({"after": 3, "limit": 2}, [1, 2]),
        ],
    )
    async def test_filters(
        self,
        client: httpx2.AsyncClient,
        stored: list[dict[str, Any]],
        params: dict[str, Any],
        expected: list[int],
    ) -> None:
        got = lines(await client.get("/replay", params=params))
        mine = [e["id"] for e in got if not e["type"].startswith("causeway.")]
        assert mine == [stored[i]["id"] for i in expected]

    async def test_resume_after_the_last_position_seen(
        self, client: httpx2.AsyncClient, stored: list[dict[str, Any]]
    ) -> None:
        first = lines(await client.get("/replay", params={"limit": 3}))
        rest = lines(await client.get("/replay", params={"after": first[-1]["position"]}))
        assert [e["position"] for e in first + rest] == [1, 2, 3, 4, 5, 6]

    async def test_a_bad_time_is_a_400(self, client: httpx2.AsyncClient) -> None:
        response = await client.get("/replay", params={"since": "monday"})
        assert response.status_code == 400
        assert response.json()["parameter"] == "since"

    async def test_a_bad_position_is_a_422_with_a_pointer(self, client: httpx2.AsyncClient) -> None:
        response = await client.get("/replay", params={"after": "-1"})
        assert response.status_code == 422
        assert response.json()["errors"][0]["pointer"] == "#/query/after"

    async def test_replay_spans_many_cursor_fetches(self, client: httpx2.AsyncClient) -> None:
        batch = [event(data={"i": i}) for i in range(2500)]
        await client.post("/events", content=dumps(batch), headers=BATCH)
        got = lines(await client.get("/replay"))
        assert [e["data"]["i"] for e in got] == list(range(2500))


class TestReplayStreams:
    """A replay holds a connection while its client reads: a process streams a bounded
    number at once, and a replay that cannot start is a problem, not a broken 200."""

    @pytest.mark.parametrize("params", [{}, {"format": "parquet"}, {"types": "none.such"}])
    async def test_every_replay_gives_its_slot_back(
        self, app: FastAPI, client: httpx2.AsyncClient, params: dict[str, str]
    ) -> None:
        await client.post("/events", content=dumps([event(), event()]), headers=BATCH)
        for _ in range(3):
            assert (await client.get("/replay", params=params)).status_code == 200
        assert app.state.replay_slots.taken == 0

    async def test_past_the_slots_a_replay_is_a_503_and_the_rest_answers(
        self, app: FastAPI, client: httpx2.AsyncClient
    ) -> None:
        slots = app.state.replay_slots
        for _ in range(slots.slots):
            slots.take()  # as slow readers would
        refused = await client.get("/replay")
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["max_streams"] == slots.slots
        assert (await client.post("/events", content=dumps(event()), headers=STRUCTURED)).is_success
        slots.give_back()
        assert (await client.get("/replay")).status_code == 200

    @pytest.mark.parametrize("replay_format", ["ndjson", "parquet"])
    async def test_a_replay_that_cannot_start_is_a_problem(
        self, database_url: Any, engine: Any, make_key: MakeKey, replay_format: str
    ) -> None:
        app = create_app(
            Settings(_env_file=None, statement_timeout_ms=300), database_url=database_url
        )
        key = await make_key("acme", "read")
        async with asgi_client(app, key) as client, engine.connect() as blocker:
            await blocker.execute(text("LOCK TABLE events IN ACCESS EXCLUSIVE MODE"))
            response = await client.get("/replay", params={"format": replay_format})
            await blocker.rollback()
        assert response.status_code == 503, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
        assert app.state.replay_slots.taken == 0
        await dispose(app)

    async def test_repeated_types_add_up(self, client: httpx2.AsyncClient) -> None:
        sent = [event(type="a.v1"), event(type="b.v1"), event(type="c.v1")]
        await client.post("/events", content=dumps(sent), headers=BATCH)
        got = lines(await client.get("/replay?types=a.v1&types=c.v1"))
        assert [e["type"] for e in got] == ["a.v1", "c.v1"]


class TestTenants:
    async def test_reads_replay_and_streams_stay_in_the_tenant(
        self, client: httpx2.AsyncClient, other_tenant: httpx2.AsyncClient
    ) -> None:
        mine = event(subject="cam")
        await client.post("/events", content=dumps(mine), headers=STRUCTURED)
        assert (await other_tenant.get(f"/events/{mine['id']}")).status_code == 404
        assert (await other_tenant.get("/streams/cam")).status_code == 404
        assert (await other_tenant.get("/replay")).text == ""

    async def test_the_same_id_in_another_tenant_is_a_new_event(
        self, client: httpx2.AsyncClient, other_tenant: httpx2.AsyncClient
    ) -> None:
        mine = event()
        await client.post("/events", content=dumps(mine), headers=STRUCTURED)
        theirs = {**mine, "data": {"other": True}}
        response = await other_tenant.post("/events", content=dumps(theirs), headers=STRUCTURED)
        assert response.status_code == 201
        assert response.json()["events"][0]["duplicate"] is False
        assert response.json()["events"][0]["stream_version"] == 1

    async def test_causes_cannot_point_into_another_tenant(
        self, client: httpx2.AsyncClient, other_tenant: httpx2.AsyncClient
    ) -> None:
        mine = event()
        await client.post("/events", content=dumps(mine), headers=STRUCTURED)
        response = await other_tenant.post(
            "/events", content=dumps(event(causationid=mine["id"])), headers=STRUCTURED
        )
        assert response.status_code == 422
        assert response.json()["type"] == "/problems/unknown-cause"


class TestHealthAndProblems:
    async def test_healthz_and_readyz(self, client: httpx2.AsyncClient) -> None:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        ready = await client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["status"] == "ready"

    async def test_load_balancers_may_probe_with_head(self, client: httpx2.AsyncClient) -> None:
        assert (await client.head("/healthz")).status_code == 200
        assert (await client.head("/readyz")).status_code == 200

    async def test_every_problem_type_is_described(self, client: httpx2.AsyncClient) -> None:
        response = await client.get("/problems/version-conflict")
        assert response.json()["status"] == 409
        assert "expectedversion" in response.json()["description"]
        assert (await client.get("/problems/no-such-thing")).status_code == 404

    async def test_an_unknown_route_is_a_problem_too(self, client: httpx2.AsyncClient) -> None:
        response = await client.get("/nowhere")
        assert response.status_code == 404
        assert response.headers["content-type"] == "application/problem+json"


class TestOddParameters:
    """Values PostgreSQL cannot take are a 4xx, never a 500 (found by fuzzing)."""

    @pytest.mark.parametrize(
        ("path", "status"),
        [
            ("/replay?after=99999999999999999999", 422),
            # U+0000 and empty filters: refused by the parameters' own patterns, which
            # the OpenAPI document shows (422, naming the parameter)
            ("/streams/a%00b", 422),
            ("/events/a%00b", 422),
            ("/replay?source=a%00b", 422),
            ("/events/%ff", 400),  # not UTF-8: not the id U+FFFD, which is %EF%BF%BD
            ("/events/%EF%BF%BD", 404),
            ("/streams/a%C3", 400),
            ("/replay?types=%ff", 400),
            ("/replay?types=", 422),  # matched every type
            ("/replay?types=,%20", 422),
            ("/replay?types=a&types=", 422),  # each names a type
            ("/replay?modelversion=", 422),  # matched nothing: no event has one empty
            ("/replay?correlationid=&format=parquet", 422),
        ],
    )
    async def test_rest(self, client: httpx2.AsyncClient, path: str, status: int) -> None:
        response = await client.get(path)
        assert response.status_code == status
        assert response.headers["content-type"] == "application/problem+json"

    @pytest.mark.parametrize(
        "query",
        [
            '{ event(id: "a\\u0000b") { id } }',
            "{ events(filter: {positionFrom: 99999999999999999999}) { edges { cursor } } }",
            '{ events(after: "cG9zaXRpb246OTk5OTk5OTk5OTk5OTk5OTk5OTk5") { edges { cursor } } }',
            '{ events(filter: {modelVersion: ""}) { edges { cursor } } }',  # as REST's
            "{ events(filter: {types: []}) { edges { cursor } } }",
        ],
    )
    async def test_graphql(self, client: httpx2.AsyncClient, query: str) -> None:
        body = (await client.post("/graphql", json={"query": query})).json()
        assert body["errors"]
        assert body["errors"][0].get("extensions", {}).get("code") in (None, "BAD_REQUEST")
        assert body["errors"][0]["message"] != "Unexpected error."


Live = tuple[FastAPI, int, str, httpx2.AsyncClient]


class TestReplayOverASocket:
    """``causeway serve``'s protocol on a real socket, one replay slot, and a store whose
    replay is larger than the socket buffers hold: readers that leave or stall."""

    @pytest.fixture
    async def live(
        self, database_url: Any, make_key: MakeKey, monkeypatch: pytest.MonkeyPatch
    ) -> AsyncIterator[Live]:
        settings = Settings(
            _env_file=None,
            replay_max_streams=1,
            run_projections=False,
            run_scheduler=False,
            send_timeout_s=3.0,  # time to see the slot taken
        )
        app = create_app(settings, database_url=database_url)
        key = await make_key("acme", "ingest,read")
        async with (
            serving(app) as port,
            httpx2.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}
            ) as client,
        ):
            padding = "x" * 2000  # 8,000 events: some 17 MB of NDJSON
            for start in range(0, 8000, 500):
                batch = [event(data={"pad": padding, "n": n}) for n in range(start, start + 500)]
                sent = await client.post("/events", content=dumps(batch), headers=BATCH)
                assert sent.status_code == 201, sent.text
            yield app, port, key, client

    @staticmethod
    async def replaying(port: int, key: str, window: int) -> socket.socket:
        reader = socket.socket()
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, window)
        reader.setblocking(False)
        await asyncio.get_running_loop().sock_connect(reader, ("127.0.0.1", port))
        reader.sendall(
            f"GET /replay HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\r\n".encode()
        )
        return reader

    @staticmethod
    async def slot_back(app: FastAPI) -> None:
        async with asyncio.timeout(15):
            while app.state.replay_slots.taken:
                await asyncio.sleep(0.05)

    async def test_a_reader_that_stops_reading_gives_its_slot_back(
        self, live: Live, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Past the send timeout the stalled reader's connection is dropped, and the next
        replay streams."""
        app, port, key, client = live
        with await self.replaying(port, key, window=4096):
            async with asyncio.timeout(10):
                while app.state.replay_slots.taken == 0:  # its stream began
                    await asyncio.sleep(0.05)
            assert (await client.get("/replay")).status_code == 503
            await self.slot_back(app)
            assert "took no byte of its answer to GET /replay for 3 s" in caplog.text
            replay = await client.get("/replay", params={"limit": "3"})
            assert replay.status_code == 200
            assert [e["data"]["n"] for e in lines(replay)] == [0, 1, 2]
        # The timeout doing its job is no fault of the service (uvicorn still says, at
        # ERROR, that the answer was cut short: an ASGI app cannot close the connection).
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert [m for m in errors if m.startswith("unexpected error")] == []

    async def test_a_reader_that_leaves_mid_replay_is_no_error(
        self, live: Live, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The replay stops between two parts and closes its cursor and connection as at
        its end: no cancelled query, no ERROR in the log, the slot back."""
        app, port, key, client = live
        loop = asyncio.get_running_loop()
        for _ in range(3):
            with await self.replaying(port, key, window=1 << 16) as reader:
                got = 0
                async with asyncio.timeout(10):
                    while got < 1_000_000 and (data := await loop.sock_recv(reader, 1 << 16)):
                        got += len(data)
                assert got >= 1_000_000
            await self.slot_back(app)
        assert (await client.get("/replay", params={"limit": "1"})).status_code == 200
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
