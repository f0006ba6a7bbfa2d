"""The route a request is filed under in ``causeway_http_request_duration_seconds`` (and
its span named by): the template of the route that takes it, ``unmatched`` only for a
path no route takes (docs/observability.md), under a path prefix (ASGI ``root_path``)
too: GraphQL's requests there were filed as ``unmatched``."""

from __future__ import annotations

from secrets import token_hex

import httpx2
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import MakeKey

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def count_of(found: Samples, route: str, method: str, status: str) -> float:
    key = (
        "causeway_http_request_duration_seconds_count",
        frozenset({("route", route), ("method", method), ("status", status)}),
    )
    return found.get(key, 0.0)


async def test_graphql_under_a_path_prefix_is_filed_as_graphql(
    app: FastAPI, make_key: MakeKey
) -> None:
    key = await make_key(f"t{token_hex(4)}", "read")
    prefixed = httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app, root_path="/causeway"),
        base_url="http://causeway",
        headers={"Authorization": f"Bearer {key}"},
    )
    async with prefixed as client:
        before = samples((await client.get("/causeway/metrics")).text)
        got = await client.get("/causeway/graphql", params={"query": "{ __typename }"})
        assert got.status_code == 200, got.text
        posted = await client.post("/causeway/graphql", json={"query": "{ __typename }"})
        assert posted.status_code == 200, posted.text
        after = samples((await client.get("/causeway/metrics")).text)
    # the prefixed /metrics itself is filed under its route: routing works under the prefix
    assert (
        count_of(after, "/metrics", "GET", "2xx") - count_of(before, "/metrics", "GET", "2xx") == 1
    )
    graphql = {
        m: count_of(after, "/graphql", m, "2xx") - count_of(before, "/graphql", m, "2xx")
        for m in ("GET", "POST")
    }
    unmatched = {
        m: count_of(after, "unmatched", m, "2xx") - count_of(before, "unmatched", m, "2xx")
        for m in ("GET", "POST")
    }
    assert graphql == {"GET": 1, "POST": 1}, f"filed as unmatched: {unmatched}"
