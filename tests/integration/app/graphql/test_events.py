"""GraphQL reads of events: one event, filtered lists, keyset pages, and tenant walls."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import orjson
import psycopg
import pytest
from fastapi import FastAPI
from sqlalchemy import URL, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.graphql.cursors import encode_cursor
from tests.integration.app.graphql.workflow import AUDIT, LINEAGE, ask
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import BATCH, digest_of, dumps
from tests.integration.events import event as cloudevent


@pytest.mark.usefixtures("stored")
class TestEvents:
    async def test_an_event_with_its_causes_effects_and_model(
        self, client: httpx2.AsyncClient
    ) -> None:
        query = """{ event(id: "tumor-1") { id type correlationId position streamVersion hash
            data model { name version signatureDigest } causes { id causes { id } }
            effects(first: 5) { edges { node { id } } pageInfo { hasNextPage } } } }"""
        found = (await ask(client, query))["data"]["event"]
        assert found["model"] == {
            "name": "tumor-detector",
            "version": "3",
            "signatureDigest": digest_of(),
        }
        assert found["causes"] == [{"id": "pre-1", "causes": [{"id": "img-1"}]}]
        assert found["effects"]["edges"] == [{"node": {"id": "dx-1"}}]
        assert found["position"] == 6  # after the two model registrations
        assert len(found["hash"]) == 64

    async def test_a_page_of_effects_says_whether_an_effect_lies_before_its_cursor(
        self, client: httpx2.AsyncClient
    ) -> None:
        query = """query ($after: String) { event(id: "pre-1") {
            effects(first: 1, after: $after) {
            edges { node { id } } pageInfo { hasPreviousPage hasNextPage endCursor } } } }"""

        async def page(after: str | None) -> dict[str, Any]:
            found = await ask(client, query, after=after)
            effects: dict[str, Any] = found["data"]["event"]["effects"]
            return effects

        first = await page(None)
        assert [e["node"]["id"] for e in first["edges"]] == ["tumor-1"]
        assert first["pageInfo"]["hasPreviousPage"] is False
        second = await page(first["pageInfo"]["endCursor"])
        assert [e["node"]["id"] for e in second["edges"]] == ["fracture-1"]
        assert second["pageInfo"]["hasPreviousPage"] is True
        assert second["pageInfo"]["hasNextPage"] is False
        # A cursor before every effect: nothing lies before it.
        assert (await page(encode_cursor(1)))["pageInfo"]["hasPreviousPage"] is False

    async def test_causes_keep_the_order_the_event_named_them(
        self, client: httpx2.AsyncClient
    ) -> None:
        found = (await ask(client, '{ event(id: "dx-1") { causes { id } } }'))["data"]["event"]
        assert [c["id"] for c in found["causes"]] == ["tumor-1", "fracture-1", "img-2"]

    async def test_of_several_operations_the_one_named_runs_and_none_without_a_name(
        self, client: httpx2.AsyncClient
    ) -> None:
        document = 'query A { event(id: "img-1") { id } } query B { event(id: "dx-1") { id } }'
        named = await client.post("/graphql", json={"query": document, "operationName": "B"})
        assert named.json() == {"data": {"event": {"id": "dx-1"}}}
        unnamed = await ask(client, document)  # the spec's GetOperation: a request error
        assert unnamed["data"] is None
        [error] = unnamed["errors"]
        assert "operationName" in error["message"]
        assert error["extensions"]["code"] == "BAD_REQUEST"

    @pytest.mark.parametrize("levels", [200, 253, 300, 1010, 1100])
    async def test_data_nested_deeper_than_the_store_now_takes_is_answered_whole(
        self,
        client: httpx2.AsyncClient,
        engine: AsyncEngine,
        levels: int,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        # Events stored before the 128-level limit may nest deeper; past 252 levels the
        # answer around the data nests past what orjson encodes.
        deep = "[" * levels + "]" * levels
        async with engine.begin() as conn:
            await conn.execute(text("ALTER TABLE events DISABLE TRIGGER events_append_only"))
            await conn.execute(
                text("UPDATE events SET data = CAST(:deep AS jsonb) WHERE id = 'img-1'"),
                {"deep": deep},
            )
            await conn.execute(text("ALTER TABLE events ENABLE TRIGGER events_append_only"))
        found = await ask(client, '{ event(id: "img-1") { data } }')
        if levels > 1000:  # past what Python's JSON writes (or reads): an error, not a 500
            assert found["errors"][0]["extensions"]["code"] == "INTERNAL"
            assert "unexpected error in GraphQL" in caplog.text  # masked, but logged
        else:
            assert json.dumps(found["data"]["event"]["data"], separators=(",", ":")) == deep
        audited = await ask(client, '{ audit(decisionId: "tumor-1") { chainVerified } }')
        # The row was forged; past 1,024 levels its data does not even read back (orjson),
        # and the walk reads it as unreadable, not sealed.
        assert audited["data"]["audit"]["chainVerified"] is False

    async def test_an_unknown_event_is_null(self, client: httpx2.AsyncClient) -> None:
        assert (await ask(client, '{ event(id: "nope") { id } }'))["data"] == {"event": None}

    async def test_filters_and_correlation(self, client: httpx2.AsyncClient) -> None:
        query = """{ events(filter: {modelName: "tumor-detector"}) { edges { node { id } } }
            registered: events(filter: {modelName: "tumor-detector",
                                        types: ["causeway.model.registered"]}) {
              edges { node { id } } }
            correlation(id: "study-42", first: 2) { edges { node { id } } } }"""
        data = (await ask(client, query))["data"]
        # What the model produced; its registration names it too, and comes when asked for.
        assert [e["node"]["id"] for e in data["events"]["edges"]] == ["tumor-1"]
        assert [e["node"]["id"] for e in data["registered"]["edges"]] == [
            "causeway:model:tumor-detector:3"
        ]
        assert [e["node"]["id"] for e in data["correlation"]["edges"]] == ["img-1", "img-2"]


class TestPagination:
    async def test_pages_have_no_duplicates_and_no_gaps(self, client: httpx2.AsyncClient) -> None:
        batch = [cloudevent(type="t.page") for _ in range(23)] + [cloudevent(type="other")]
        await client.post("/events", content=dumps(batch), headers=BATCH)
        query = """query ($after: String) { events(filter: {types: ["t.page"]}, first: 5,
                   after: $after) { edges { cursor node { id } }
                   pageInfo { hasNextPage endCursor } } }"""
        seen: list[str] = []
        after = None
        for _ in range(10):
            page = (await ask(client, query, after=after))["data"]["events"]
            seen += [e["node"]["id"] for e in page["edges"]]
            if not page["pageInfo"]["hasNextPage"]:
                break
            after = page["pageInfo"]["endCursor"]
        assert seen == [e["id"] for e in batch[:23]]

    async def test_has_previous_page_says_whether_a_match_lies_before_the_cursor(
        self, client: httpx2.AsyncClient
    ) -> None:
        batch = [cloudevent(type="other"), cloudevent(type="t.prev"), cloudevent(type="t.prev")]
        await client.post("/events", content=dumps(batch), headers=BATCH)
        query = """query ($types: [String!], $from: BigInt, $after: String) {
            events(filter: {types: $types, positionFrom: $from}, first: 1, after: $after) {
            edges { node { id } } pageInfo { hasPreviousPage endCursor } } }"""

        async def page(**variables: Any) -> dict[str, Any]:
            found: dict[str, Any] = (await ask(client, query, **variables))["data"]["events"]
            return found

        first = await page(types=["t.prev"])
        assert first["pageInfo"]["hasPreviousPage"] is False
        second = await page(types=["t.prev"], after=first["pageInfo"]["endCursor"])
        assert second["edges"][0]["node"]["id"] == batch[2]["id"]
        assert second["pageInfo"]["hasPreviousPage"] is True
        # After a cursor, but nothing of the filter before it: "other" is not a t.prev.
        skipped = await page(types=["t.prev"], after=encode_cursor(1))
        assert skipped["pageInfo"]["hasPreviousPage"] is False
        # From a position: what lies before it is not a previous page of this filter.
        late = await page(**{"from": 3, "after": encode_cursor(2)})
        assert late["edges"][0]["node"]["id"] == batch[2]["id"]
        assert late["pageInfo"]["hasPreviousPage"] is False
        assert (await page(**{"from": 2, "after": encode_cursor(2)}))["pageInfo"][
            "hasPreviousPage"
        ] is True

    async def test_a_stream_from_a_version(self, client: httpx2.AsyncClient) -> None:
        await client.post(
            "/events", content=dumps([cloudevent(stream="s") for _ in range(4)]), headers=BATCH
        )
        query = '{ stream(id: "s", fromVersion: 3) { edges { node { streamVersion } } } }'
        edges = (await ask(client, query))["data"]["stream"]["edges"]
        assert [e["node"]["streamVersion"] for e in edges] == [3, 4]
        refused = await ask(client, '{ stream(id: "s", fromVersion: 0) { edges { cursor } } }')
        assert refused["errors"][0]["extensions"]["code"] == "BAD_REQUEST"  # as REST says

    @pytest.mark.parametrize(
        "sent", ['"\u00b2"', '"\u0664"', '"99999999999999999999999"', '"9223372036854775808"']
    )
    async def test_a_position_is_ascii_digits_within_64_bits(
        self, client: httpx2.AsyncClient, sent: str
    ) -> None:
        literal = await ask(
            client, f"{{ events(filter: {{positionFrom: {sent}}}) {{ edges {{ cursor }} }} }}"
        )
        assert literal["errors"][0]["extensions"]["code"] == "BAD_REQUEST"
        query = "query ($p: BigInt) { events(filter: {positionFrom: $p}) { edges { cursor } } }"
        variable = await ask(client, query, p=orjson.loads(sent))
        message = variable["errors"][0]["message"]
        assert "is not a position: an integer from 0 to 9223372036854775807" in message

    async def test_a_forged_cursor_is_a_clear_error(self, client: httpx2.AsyncClient) -> None:
        body = await ask(client, '{ events(after: "bm90LWEtY3Vyc29y") { edges { cursor } } }')
        assert body["errors"][0]["extensions"]["code"] == "BAD_REQUEST"


class TestTenants:
    async def test_another_tenant_sees_nothing_and_lineage_never_crosses(
        self, client: httpx2.AsyncClient, app: FastAPI, make_key: MakeKey, stored: None
    ) -> None:
        key = await make_key("clinic-b", "ingest,read")
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(
            transport=transport, base_url="http://c", headers={"Authorization": f"Bearer {key}"}
        ) as other:
            theirs = [cloudevent(id="img-1"), cloudevent(id="b-2", causationid="img-1")]
            await other.post("/events", content=dumps(theirs), headers=BATCH)
            body = await ask(other, AUDIT, id="dx-1")
            assert body["errors"][0]["extensions"]["code"] == "NOT_FOUND"
            assert (await ask(other, '{ event(id: "tumor-1") { id } }'))["data"]["event"] is None
        mine = (await ask(client, LINEAGE, id="img-1", dir="DOWNSTREAM", depth=10, limit=100))[
            "data"
        ]["lineage"]
        assert "b-2" not in {n["event"]["id"] for n in mine["nodes"]}

    async def test_a_forged_edge_between_tenants_brings_neither_the_others_events(
        self,
        client: httpx2.AsyncClient,
        app: FastAPI,
        make_key: MakeKey,
        database_url: URL,
        stored: None,
    ) -> None:
        """Append checks that causes are the tenant's own; an edge written past it still
        leads no walk, either way, into another tenant's events."""
        key = await make_key("clinic-b", "ingest,read")
        theirs = {**BATCH, "Authorization": f"Bearer {key}"}
        response = await client.post(
            "/events", content=dumps([cloudevent(id="b-1")]), headers=theirs
        )
        assert response.status_code == 201, response.text
        review = cloudevent(id="review-1", causationid="dx-1")
        response = await client.post("/events", content=dumps([review]), headers=BATCH)
        assert response.status_code == 201, response.text
        with psycopg.connect(
            database_url.set(drivername="postgresql").render_as_string(hide_password=False),
            autocommit=True,
        ) as conn:
            conn.execute(
                "INSERT INTO event_causes (effect, cause) SELECT e.position, c.position"
                " FROM events e, events c WHERE e.tenant = 'acme' AND e.id = 'review-1'"
                " AND c.tenant = 'clinic-b' AND c.id = 'b-1'"
            )
        audit = (await ask(client, AUDIT, id="review-1"))["data"]["audit"]
        shown = {n["event"]["id"] for n in audit["graph"]["nodes"]}
        assert shown == {"review-1", "dx-1", "tumor-1", "fracture-1", "img-2", "pre-1", "img-1"}
        async with asgi_client(app, key) as other:
            found = await ask(other, LINEAGE, id="b-1", dir="DOWNSTREAM", depth=10, limit=100)
        assert {n["event"]["id"] for n in found["data"]["lineage"]["nodes"]} == {"b-1"}
