"""GET /routes/{id} is a read of the scheduler like GET /routes (README, "The HTTP API"):
it takes Causeway-Min-Position / min_position, answers nothing older (503 with
Retry-After when the read model is not there yet), and refuses the header twice. It
ignored both."""

from __future__ import annotations

import httpx2
import pytest
from fastapi import FastAPI

from app.settings import Settings
from tests.integration.conftest import MakeKey


@pytest.fixture
def settings() -> Settings:
    return Settings(_env_file=None, read_wait_ms=200)  # a short wait keeps them quick


def _client(app: FastAPI, key: str) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app),
        base_url="http://localhost:8000",
        headers={"Authorization": f"Bearer {key}"},
    )


async def test_route_read_honours_min_position_like_every_other_read(
    app: FastAPI, make_key: MakeKey
) -> None:
    async with _client(app, await make_key("default", "admin")) as http:
        define = await http.post(
            "/routes",
            json={"id": "detect", "types": ["com.example.frame.*"], "kind": "k", "queue": "gpu"},
        )
        assert define.status_code == 201, define.text
        past_head = {"Causeway-Min-Position": "999"}
        listed = await http.get("/routes", headers=past_head)
        assert listed.status_code == 503  # the list honours it
        one = await http.get("/routes/detect", headers=past_head)
        assert one.status_code == 503, f"GET /routes/detect ignored the position: {one.text}"


async def test_route_read_refuses_the_min_position_header_twice(
    app: FastAPI, make_key: MakeKey
) -> None:
    async with _client(app, await make_key("default", "admin")) as http:
        twice = [("Causeway-Min-Position", "1"), ("Causeway-Min-Position", "2")]
        assert (await http.get("/routes", headers=twice)).status_code == 400
        one = await http.get("/routes/detect", headers=twice)
        assert one.status_code == 400, f"GET /routes/{{id}}: {one.status_code} {one.text}"
