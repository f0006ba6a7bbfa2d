"""One rule for JSON read from a request, on every endpoint that reads it: what is not
JSON, and an object naming a member twice, is a 400 ``invalid-json`` problem (naming the
member); a JSON content type in a charset other than UTF-8 is a 415; a request with two
``Authorization`` headers is a 400."""

from __future__ import annotations

import httpx2
import orjson
import pytest

from tests.integration.events import event

JSON_ENDPOINTS = [
    ("POST", "/events", "application/cloudevents+json"),
    ("POST", "/events", "application/cloudevents-batch+json"),
    ("POST", "/events", "application/json"),  # binary mode, JSON data
    ("POST", "/graphql", "application/json"),
    ("POST", "/api/v1/lineage", "application/json"),
    ("POST", "/models/m/versions", "application/json"),
    ("PUT", "/models/m/aliases/prod", "application/json"),
    ("POST", "/deployments/svc/rollouts", "application/json"),
    ("POST", "/deployments/svc/traffic", "application/json"),
    ("POST", "/deployments/svc/promote", "application/json"),
    ("POST", "/deployments/svc/rollback", "application/json"),
    ("POST", "/routes", "application/json"),
    ("DELETE", "/routes/r1", "application/json"),
    ("POST", "/queues/q/lease", "application/json"),
    ("POST", "/tasks/t1/complete", "application/json"),
    ("POST", "/tasks/t1/fail", "application/json"),
    ("POST", "/tasks/t1/heartbeat", "application/json"),
    ("POST", "/dead-letters/t1/requeue", "application/json"),
    ("POST", "/dead-letters/t1/discard", "application/json"),
]
BINARY = {"ce-id": "b1", "ce-source": "/s", "ce-type": "t", "ce-specversion": "1.0"}


def _headers(content_type: str) -> dict[str, str]:
    extra = BINARY if content_type == "application/json" else {}
    return {"Content-Type": content_type, **extra}


async def test_malformed_json_is_the_same_400_everywhere(admin: httpx2.AsyncClient) -> None:
    for method, path, content_type in JSON_ENDPOINTS:
        response = await admin.request(
            method, path, content=b'{"a": 1,', headers=_headers(content_type)
        )
        assert response.status_code == 400, (path, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["type"] == "/problems/invalid-json", (path, response.text)


async def test_a_member_named_twice_is_a_400_naming_it(admin: httpx2.AsyncClient) -> None:
    for method, path, content_type in JSON_ENDPOINTS:
        body = b'{"lease": "x", "nested": {"twice": 1, "twice": 2}}'
        if content_type == "application/cloudevents-batch+json":
            body = b"[" + body + b"]"
        response = await admin.request(method, path, content=body, headers=_headers(content_type))
        assert response.status_code == 400, (path, response.text)
        problem = response.json()
        assert problem["type"] == "/problems/invalid-json", (path, response.text)
        assert "'twice'" in problem["detail"]


async def test_a_json_body_in_another_charset_is_415(admin: httpx2.AsyncClient) -> None:
    for method, path, content_type in JSON_ENDPOINTS:
        headers = _headers(content_type)
        headers["Content-Type"] += "; charset=ISO-8859-1"
        response = await admin.request(method, path, content=b"{}", headers=headers)
        assert response.status_code == 415, (path, response.text)
        assert response.json()["charset"] == "iso-8859-1"


class TestDuplicateNamesInEvents:
    async def test_a_duplicated_id_is_refused_and_nothing_is_stored(
        self, client: httpx2.AsyncClient
    ) -> None:
        sent = event()
        body = orjson.dumps(sent)[:-1] + b',"id":"B"}'
        response = await client.post(
            "/events", content=body, headers={"Content-Type": "application/cloudevents+json"}
        )
        assert response.status_code == 400
        assert response.json()["member"] == "id"
        assert (await client.get("/events/B")).status_code == 404

    async def test_a_colon_spelled_as_an_escape_does_not_hide_a_duplicate(
        self, client: httpx2.AsyncClient
    ) -> None:
        body = orjson.dumps(event(subject="a:b"))[:-1] + b',"x":"\\u003a","x":"y"}'
        response = await client.post(
            "/events", content=body, headers={"Content-Type": "application/cloudevents+json"}
        )
        assert response.json()["member"] == "x"

    async def test_colons_in_strings_and_escapes_alone_are_stored(
        self, client: httpx2.AsyncClient
    ) -> None:
        sent = event(subject="urn:a:b", data={"t": "12:00", "u": "\u003a:"})
        body = orjson.dumps(sent).replace(b'"\\u003a:"', b'"\\u003a:"')
        response = await client.post(
            "/events", content=body, headers={"Content-Type": "application/cloudevents+json"}
        )
        assert response.status_code == 201, response.text


class TestDuplicateIdInABatch:
    async def test_names_both_indexes(self, client: httpx2.AsyncClient) -> None:
        first, other = event(subject="a"), event(subject="b")
        other["id"] = first["id"]
        response = await client.post(
            "/events",
            content=orjson.dumps([event(), first, other]),
            headers={"Content-Type": "application/cloudevents-batch+json"},
        )
        assert response.status_code == 409
        detail = response.json()["errors"][0]["detail"]
        assert "duplicated in the batch" in detail
        assert "events 1 and 2" in detail


class TestAuthorization:
    @pytest.mark.parametrize(("method", "path"), [("POST", "/events"), ("GET", "/models")])
    async def test_two_authorization_headers_are_a_400(
        self, client: httpx2.AsyncClient, method: str, path: str
    ) -> None:
        key = client.headers["authorization"]
        headers = httpx2.Headers([("authorization", key), ("authorization", "Bearer other")])
        response = await client.request(
            method,
            path,
            content=orjson.dumps(event()) if method == "POST" else None,
            headers=headers,
        )
        assert response.status_code == 400
        assert response.json()["header"] == "authorization"

    async def test_two_on_graphql_are_a_400(self, client: httpx2.AsyncClient) -> None:
        key = client.headers["authorization"]
        headers = httpx2.Headers([("authorization", key), ("authorization", key)])
        response = await client.post("/graphql", json={"query": "{__typename}"}, headers=headers)
        assert response.status_code == 400
