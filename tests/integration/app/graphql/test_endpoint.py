"""The GraphQL endpoint over HTTP: GraphiQL, a path prefix, no subscriptions, and which
errors are logged."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from fastapi import FastAPI
from sqlalchemy import URL

from app.main import Causeway, create_app, dispose
from app.settings import Settings
from tests.integration import asgi
from tests.integration.app.graphql.workflow import AUDIT, ask
from tests.integration.conftest import MakeKey
from tests.integration.events import dumps


class TestEndpoint:
    async def test_graphiql_is_served_to_browsers_without_a_key(self, app: FastAPI) -> None:
        async with httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app), base_url="http://c"
        ) as anonymous:
            page = await anonymous.get("/graphql", headers={"Accept": "text/html"})
            assert page.status_code == 200
            assert "graphiql" in page.text.lower()
            query = await anonymous.post("/graphql", json={"query": '{ event(id: "x") { id } }'})
            assert query.status_code == 401
            assert query.headers["content-type"] == "application/problem+json"


class TestBehindAPathPrefix:
    """At the root, ``Causeway`` hands POST /graphql to Strawberry's ASGI face of the view;
    under a prefix, FastAPI routes it to the documented router. A client sees no
    difference, errors included."""

    @pytest.fixture
    async def served(self, database_url: URL) -> AsyncIterator[Causeway]:
        app = create_app(
            Settings(_env_file=None, graphql_max_request_bytes=2048), database_url=database_url
        )
        assert isinstance(app, Causeway)
        yield app
        await dispose(app)

    async def test_both_faces_answer_every_request_alike(
        self, served: Causeway, make_key: MakeKey, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        handed: list[str] = []
        direct_app = served.graphql

        async def counting(scope: Any, receive: Any, send: Any) -> None:
            handed.append(scope["path"])
            await direct_app(scope, receive, send)

        monkeypatch.setattr(served, "graphql", counting)
        outer = FastAPI()
        outer.mount("/api", served)
        reader, writer = await make_key("acme", "read"), await make_key("acme", "ingest")
        json_type = {"Content-Type": "application/json"}
        requests: list[tuple[str, bytes, dict[str, str]]] = [
            (reader, dumps({"query": AUDIT, "variables": {"id": "nope"}}), json_type),
            (reader, dumps({"query": "{ __typename nope }"}), json_type),
            (reader, b"{", json_type),
            (reader, dumps({"variables": {}}), json_type),
            (reader, b"{ __typename }", {"Content-Type": "text/plain"}),
            (reader, b" null", json_type),
            (reader, b'"{ __typename }"', json_type),
            (reader, dumps([{"query": "{ __typename }"}]), json_type),
            (reader, dumps({"query": 5}), json_type),
            (reader, dumps({"query": "{ __typename }", "variables": "{}"}), json_type),
            (reader, dumps({"query": "{ __typename }", "operationName": "Nope"}), json_type),
            (reader, dumps({"query": "{ __typename }", "pad": "x" * 3000}), json_type),
            ("nope", dumps({"query": "{ __typename }"}), json_type),
            (writer, dumps({"query": "{ __typename }"}), json_type),
        ]
        statuses = []
        for key, body, headers in requests:
            answers = []
            for base, transport in (
                ("http://c", httpx2.ASGITransport(app=served)),
                ("http://c/api", httpx2.ASGITransport(app=outer)),
            ):
                async with httpx2.AsyncClient(transport=transport, base_url=base) as client:
                    response = await client.post(
                        "/graphql",
                        content=body,
                        headers={**headers, "Authorization": f"Bearer {key}"},
                    )
                answers.append(
                    (
                        response.status_code,
                        response.headers.get("content-type"),
                        response.headers.get("www-authenticate"),
                        response.text,
                    )
                )
            assert answers[0] == answers[1], body
            statuses.append(answers[0][0])
            if answers[0][0] >= 400:  # every refusal is a problem, none plain text
                assert (answers[0][1] or "").startswith("application/problem+json"), answers[0]
        assert statuses == [200, 200, *[400] * 9, 413, 401, 403]
        assert handed == ["/graphql"] * len(requests)


@pytest.mark.parametrize("keyed", [False, True], ids=["no key", "read key"])
async def test_a_websocket_is_refused_there_being_nothing_to_subscribe_to(
    app: FastAPI, make_key: MakeKey, keyed: bool
) -> None:
    """The schema has no subscriptions: a websocket without a key gets a 401, one with a
    key is closed at once (4406, no protocol to speak), and neither is a server error."""
    headers = [(b"sec-websocket-protocol", b"graphql-transport-ws")]
    if keyed:
        headers.append((b"authorization", f"Bearer {await make_key('acme', 'read')}".encode()))
    connection = asgi.scope(
        "websocket", "/graphql", headers, subprotocols=["graphql-transport-ws"], scheme="ws"
    )
    sent = await asgi.call(
        app,
        connection,
        [{"type": "websocket.connect"}],
        then={"type": "websocket.disconnect", "code": 1000},
    )
    [answer] = [
        m for m in sent if m["type"] in {"websocket.http.response.start", "websocket.close"}
    ]
    if keyed:
        assert (answer["type"], answer["code"]) == ("websocket.close", 4406)
    else:
        assert (answer["type"], answer["status"]) == ("websocket.http.response.start", 401)


async def test_a_clients_error_is_answered_not_logged(
    client: httpx2.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Unknown ids and values PostgreSQL refuses are the client's errors: the log would
    otherwise hold a traceback for each, and for the refused value the SQL and its
    parameters."""
    caplog.set_level(logging.INFO)
    missing = await ask(client, AUDIT, id="nowhere")
    refused = await ask(client, '{ lineage(id: "a\\u0000b") { truncated } }')
    assert missing["errors"][0]["extensions"]["code"] == "NOT_FOUND"
    assert refused["errors"][0]["extensions"]["code"] == "BAD_REQUEST"
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize(
    ("query", "argument"),
    [
        ('{ audit(decisionId: "x", maxDepth: -1) { truncated } }', "maxDepth"),
        ('{ lineage(id: "x", maxDepth: -1) { truncated } }', "maxDepth"),
        ('{ lineage(id: "x", limit: -1) { truncated } }', "limit"),
    ],
)
async def test_a_negative_bound_names_its_argument(
    client: httpx2.AsyncClient, query: str, argument: str
) -> None:
    """audit has no limit, yet was told "maxDepth and limit must not be negative"."""
    [error] = (await ask(client, query))["errors"]
    assert error["message"] == f"{argument} must not be negative"
    assert error["extensions"]["code"] == "BAD_REQUEST"


# POST /graphql is answered before FastAPI, past its app-wide check: it kept the larger
# of two positions, where GET answered 400 as every other route does.
@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_query_parameter_given_twice_is_a_400_on_both_faces(
    client: httpx2.AsyncClient, method: str
) -> None:
    url = "/graphql?min_position=1&min_position=0"
    query = "{ __typename }"
    if method == "GET":
        response = await client.get(url + "&query=" + query)
    else:
        response = await client.post(url, json={"query": query})
    assert response.status_code == 400, response.text
    assert response.json()["detail"] == "min_position is given 2 times: it takes one value"
