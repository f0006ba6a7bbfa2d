"""Every request body is capped at CAUSEWAY_MAX_REQUEST_BYTES, read no further than that,
and refused with a payload-too-large problem, whether or not the caller has a key."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI

from app.settings import Settings
from tests.integration.conftest import MakeKey, asgi_client

CAP = 4096


@pytest.fixture
def settings() -> Settings:
    return Settings(_env_file=None, max_request_bytes=CAP)


def oversized() -> bytes:
    return b'{"name": "' + b"a" * (4 * CAP) + b'"}'


def streamed(body: bytes, read: list[int]) -> AsyncIterator[bytes]:
    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 1024):
            read.append(start)
            yield body[start : start + 1024]

    return chunks()


@pytest.mark.parametrize("path", ["/routes", "/models/m/versions"])
@pytest.mark.parametrize("keyed", [False, True], ids=["no key", "admin key"])
@pytest.mark.parametrize("declared", [True, False], ids=["declared", "streamed"])
async def test_a_body_past_the_cap_is_a_413_before_it_is_read(
    app: FastAPI, make_key: MakeKey, path: str, keyed: bool, declared: bool
) -> None:
    """A route's body parameter is read before the key is checked: the cap is what keeps
    a caller without a key from making the service hold a body of any size."""
    key = await make_key("acme", "admin") if keyed else "none"
    body, read = oversized(), list[int]()
    async with asgi_client(app, key) as client:
        response = await client.post(
            path,
            content=body if declared else streamed(body, read),
            headers={"Content-Type": "application/json"},
        )
    assert response.status_code == 413, response.text
    problem = response.json()
    assert problem["type"] == "/problems/payload-too-large"
    assert (problem["limit"], problem["max_bytes"]) == ("max_request_bytes", CAP)
    if not declared:
        assert len(read) < len(range(0, len(body), 1024)), "the rest of the body was read"


async def test_a_body_under_the_cap_still_meets_the_key_check(app: FastAPI) -> None:
    async with asgi_client(app, "none") as client:
        response = await client.post("/routes", json={"name": "small"})
    assert response.status_code == 401
    assert response.json()["type"] == "/problems/unauthenticated"


async def test_requests_without_a_body_are_untouched(app: FastAPI, make_key: MakeKey) -> None:
    async with asgi_client(app, await make_key("acme", "read")) as client:
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/replay")).status_code == 200
