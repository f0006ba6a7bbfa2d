"""Errors Starlette raises before any route of ours runs, answered as problems."""

from __future__ import annotations

import httpx2
import pytest


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PATCH", "/routes/r1", "DELETE, GET"),  # two routes at one path
        ("OPTIONS", "/graphql", "GET, POST"),  # POST is answered before routing
        ("PUT", "/events", "POST"),
        ("POST", "/healthz", "GET, HEAD"),
    ],
)
async def test_a_405_names_every_method_the_path_takes(
    admin: httpx2.AsyncClient, method: str, path: str, allowed: str
) -> None:
    # RFC 9110 (15.5.6): Allow lists the target's methods; Starlette listed only those of
    # the first route whose path matched.
    response = await admin.request(method, path)
    assert response.status_code == 405
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["allow"] == allowed
