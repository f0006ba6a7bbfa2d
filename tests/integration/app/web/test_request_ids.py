"""Every answer says its request id (``X-Request-Id``): the client's own when it is sane,
else one the service made; the fast ``POST /events``, other routes and problems alike."""

from __future__ import annotations

import re

import httpx2
import orjson
import pytest

from tests.integration.events import STRUCTURED, event

MADE = re.compile(r"[0-9a-f]{32}")


class TestRequestId:
    async def test_a_success_echoes_the_clients_id(self, client: httpx2.AsyncClient) -> None:
        answer = await client.get("/healthz", headers={"X-Request-Id": "req-7f3a.b/c:d=1"})
        assert answer.status_code == 200
        assert answer.headers["x-request-id"] == "req-7f3a.b/c:d=1"

    async def test_a_request_without_one_gets_a_new_id_each_time(
        self, client: httpx2.AsyncClient
    ) -> None:
        ids = [(await client.get("/healthz")).headers["x-request-id"] for _ in range(2)]
        assert all(MADE.fullmatch(rid) for rid in ids)
        assert ids[0] != ids[1]

    @pytest.mark.parametrize(
        "sent", ["", "has space", "x" * 129, 'quote"', "\u00e9t\u00e9"], ids=repr
    )
    async def test_an_id_that_is_not_sane_is_replaced(
        self, client: httpx2.AsyncClient, sent: str
    ) -> None:
        answer = await client.get("/healthz", headers={b"x-request-id": sent.encode()})
        assert MADE.fullmatch(answer.headers["x-request-id"])

    async def test_a_problem_answer_carries_it(self, client: httpx2.AsyncClient) -> None:
        answer = await client.get("/events/no-such-event", headers={"X-Request-Id": "abc"})
        assert answer.status_code == 404
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.headers["x-request-id"] == "abc"

    async def test_the_fast_post_events_path_carries_it(self, client: httpx2.AsyncClient) -> None:
        posted = await client.post(
            "/events",
            content=orjson.dumps(event()),
            headers={**STRUCTURED, "X-Request-Id": "ingest-1"},
        )
        assert posted.status_code == 201
        assert posted.headers["x-request-id"] == "ingest-1"
        refused = await client.post(
            "/events", content=b"{", headers={**STRUCTURED, "X-Request-Id": "ingest-2"}
        )
        assert refused.status_code == 400
        assert refused.headers["x-request-id"] == "ingest-2"

    async def test_a_refusal_before_the_body_carries_it(self, client: httpx2.AsyncClient) -> None:
        # 413 on the declared length, answered by the body cap before any route runs.
        too_large = await client.post(
            "/models/faces/versions",
            content=b"{}",
            headers={"Content-Length": str(1 << 40), "X-Request-Id": "big"},
        )
        assert too_large.status_code == 413
        assert too_large.headers["x-request-id"] == "big"
