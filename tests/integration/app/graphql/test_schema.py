"""GraphQL over HTTP against a real PostgreSQL: a medical-imaging workflow, audited."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import orjson
import psycopg
import pytest
from fastapi import FastAPI
from sqlalchemy import URL, event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.graphql.types import encode_cursor
from app.main import Causeway, create_app, dispose
from app.settings import Settings
from tests.integration import asgi
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import BATCH, digest_of, dumps
from tests.integration.events import event as cloudevent
from tests.integration.forgery import position_of, rewrite

AUDIT = """
query ($id: ID!) {
  audit(decisionId: $id) {
    decision { id }
    sourceEvents { id }
    derivedEvents { id }
    models { name version signatureDigest events { id } }
    graph { nodes { depth event { id } } edges { cause { id } effect { id } } truncated }
    chainVerified
    truncated
  }
}
"""
LINEAGE = """
query ($id: ID!, $dir: LineageDirection!, $depth: Int!, $limit: Int!, $types: [String!]) {
  lineage(id: $id, direction: $dir, maxDepth: $depth, limit: $limit, types: $types) {
    root { id }
    nodes { depth event { id } }
    edges { cause { id } effect { id } }
    truncated
  }
}
"""


def hospital() -> list[dict[str, Any]]:
    """Two images, one preprocessed and read by two models (a diamond), then a diagnosis
    caused by both readings and the second image (three causes)."""

    def ce(event_id: str, event_type: str, **attributes: Any) -> dict[str, Any]:
        return cloudevent(
            id=event_id,
            type=f"org.hospital.imaging.{event_type}",
            correlationid="study-42",
            **attributes,
        )

    return [
        ce("img-1", "uploaded", source="/pacs", data={"modality": "CT"}),
        ce("img-2", "uploaded", source="/pacs", data={"modality": "XR"}),
        ce("pre-1", "preprocessed", source="/prep", causationid="img-1"),
        ce(
            "tumor-1",
            "inferred",
            source="/models",
            causationid="pre-1",
            modelname="tumor-detector",
            modelversion="3",
            modelsig=digest_of(),
        ),
        ce(
            "fracture-1",
            "inferred",
            source="/models",
            causationid="pre-1",
            modelname="fracture-detector",
            modelversion="1",
            modelsig=digest_of(),
        ),
        ce("dx-1", "diagnosed", source="/decisions", causationid="tumor-1,fracture-1,img-2"),
    ]


async def ask(client: httpx2.AsyncClient, query: str, **variables: Any) -> dict[str, Any]:
    response = await client.post("/graphql", json={"query": query, "variables": variables})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def ids(items: list[dict[str, Any]]) -> set[str]:
    return {item["id"] for item in items}


@pytest.fixture
async def stored(client: httpx2.AsyncClient, register: Any) -> None:
    await register("tumor-detector", "3")
    await register("fracture-detector", "1")
    response = await client.post("/events", content=dumps(hospital()), headers=BATCH)
    assert response.status_code == 201


@pytest.mark.usefixtures("stored")
class TestAudit:
    async def test_the_audit_names_sources_derived_events_and_models(
        self, client: httpx2.AsyncClient
    ) -> None:
        answer = (await ask(client, AUDIT, id="dx-1"))["data"]["audit"]
        assert answer["decision"] == {"id": "dx-1"}
        assert ids(answer["sourceEvents"]) == {"img-1", "img-2"}
        assert ids(answer["derivedEvents"]) == {"pre-1", "tumor-1", "fracture-1"}
        assert answer["models"] == [
            {
                "name": "fracture-detector",
                "version": "1",
                "signatureDigest": digest_of(),
                "events": [{"id": "fracture-1"}],
            },
            {
                "name": "tumor-detector",
                "version": "3",
                "signatureDigest": digest_of(),
                "events": [{"id": "tumor-1"}],
            },
        ]
        assert answer["chainVerified"] is True
        assert answer["truncated"] is False
        edges = {(e["cause"]["id"], e["effect"]["id"]) for e in answer["graph"]["edges"]}
        assert edges == {
            ("img-1", "pre-1"),
            ("pre-1", "tumor-1"),
            ("pre-1", "fracture-1"),
            ("tumor-1", "dx-1"),
            ("fracture-1", "dx-1"),
            ("img-2", "dx-1"),
        }

    async def test_an_unknown_decision_is_not_found(self, client: httpx2.AsyncClient) -> None:
        body = await ask(client, AUDIT, id="nope")
        assert body["data"] is None
        [error] = body["errors"]
        assert error["extensions"]["code"] == "NOT_FOUND"
        assert error["message"] == "no event with id 'nope'"

    async def test_a_tampered_ancestor_fails_chain_verification(
        self, client: httpx2.AsyncClient, database_url: URL
    ) -> None:
        with psycopg.connect(
            database_url.set(drivername="postgresql").render_as_string(hide_password=False),
            autocommit=True,
        ) as conn:
            conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
            conn.execute("""UPDATE events SET data = '{"modality": "MR"}' WHERE id = 'img-1'""")
            conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
        answer = (await ask(client, AUDIT, id="dx-1"))["data"]["audit"]
        assert answer["chainVerified"] is False

    @pytest.mark.parametrize(
        ("forged", "audited"),
        [
            # img-2 comes next in the log, and is not in tumor-1's lineage.
            pytest.param("img-1", "tumor-1", id="an ancestor, sealed by the event after it"),
            pytest.param("dx-1", "dx-1", id="the newest event, sealed by the log head"),
        ],
    )
    async def test_an_event_rewritten_with_a_recomputed_hash_fails_chain_verification(
        self, client: httpx2.AsyncClient, database_url: URL, forged: str, audited: str
    ) -> None:
        """A forger who can rewrite a row can also recompute its SHA-256: the event then
        matches its own hash, and its link to its predecessor still holds. What gives it
        away is the event after it (or the log head), which names the hash it had."""
        rewrite(database_url, position_of(database_url, forged), {"forged": True})
        answer = (await ask(client, AUDIT, id=audited))["data"]["audit"]
        assert forged in ids(answer["sourceEvents"]) | {answer["decision"]["id"]}
        assert answer["chainVerified"] is False

    @pytest.mark.parametrize(
        "statements",
        [
            # An edge needs no trigger disabled: tumor-1 made to derive from img-2.
            pytest.param(
                ["INSERT INTO event_causes (effect, cause) SELECT e.position, c.position"
                 " FROM events e, events c WHERE e.id = 'tumor-1' AND c.id = 'img-2'"],
                id="a forged edge",
            ),
            pytest.param(
                ["ALTER TABLE event_causes DISABLE TRIGGER event_causes_append_only",
                 "DELETE FROM event_causes WHERE effect = (SELECT position FROM events"
                 " WHERE id = 'pre-1')",
                 "ALTER TABLE event_causes ENABLE TRIGGER event_causes_append_only"],
                id="a deleted edge",
            ),
        ],
    )  # fmt: skip
    async def test_a_causal_graph_that_differs_from_the_hashed_causes_fails_verification(
        self, client: httpx2.AsyncClient, database_url: URL, statements: list[str]
    ) -> None:
        """Walks follow event_causes, which the chain does not cover: a forged edge brings
        in an event no event in the answer names, a deleted one leaves out a named cause."""
        before = (await ask(client, AUDIT, id="tumor-1"))["data"]["audit"]
        assert before["chainVerified"] is True
        with psycopg.connect(
            database_url.set(drivername="postgresql").render_as_string(hide_password=False),
            autocommit=True,
        ) as conn:
            for statement in statements:
                conn.execute(statement)
        answer = (await ask(client, AUDIT, id="tumor-1"))["data"]["audit"]
        assert ids(answer["sourceEvents"]) != ids(before["sourceEvents"])
        assert answer["chainVerified"] is False


async def test_the_chain_verifies_over_every_shape_of_stored_event(
    client: httpx2.AsyncClient,
) -> None:
    """What the walk reads back (binary data, JSON null, no data, unicode, big and
    fractional numbers, nanosecond times with an offset, extensions, a cause id that
    needs escaping) hashes as stored."""
    shapes = [
        cloudevent(id="bin", data=..., data_base64="AAEC/w==", datacontenttype="image/png"),
        cloudevent(id="null", data=None),
        cloudevent(id="none", data=...),
        cloudevent(id="text", data={"name": "Zoë ✓", "n": 2**53 - 1, "x": -0.5, "e": 1.5e-7}),
        cloudevent(id="time", time="2026-12-01T10:00:00.123456789+05:30", traceparent="00-x"),
        cloudevent(id='odd "id" \\ é {x}', data={"k": 'a "quoted" \\ value'}),
    ]
    decision = cloudevent(id="verdict", causationid=",".join(e["id"] for e in shapes))
    response = await client.post("/events", content=dumps([*shapes, decision]), headers=BATCH)
    assert response.status_code == 201, response.text
    answer = (await ask(client, AUDIT, id="verdict"))["data"]["audit"]
    assert ids(answer["sourceEvents"]) == {e["id"] for e in shapes}
    assert answer["chainVerified"] is True


@pytest.mark.usefixtures("stored")
class TestLineage:
    @pytest.mark.parametrize(
        ("root", "direction", "depth", "expected", "truncated"),
        [
            ("dx-1", "UPSTREAM", 1, {"dx-1": 0, "tumor-1": 1, "fracture-1": 1, "img-2": 1}, True),
            (
                "dx-1",
                "UPSTREAM",
                2,
                {"dx-1": 0, "tumor-1": 1, "fracture-1": 1, "img-2": 1, "pre-1": 2},
                True,
            ),
            (
                "dx-1",
                "UPSTREAM",
                3,
                {"dx-1": 0, "tumor-1": 1, "fracture-1": 1, "img-2": 1, "pre-1": 2, "img-1": 3},
                False,
            ),
            (
                "img-1",
                "DOWNSTREAM",
                10,
                {"img-1": 0, "pre-1": 1, "tumor-1": 2, "fracture-1": 2, "dx-1": 3},
                False,
            ),
            ("pre-1", "BOTH", 1, {"pre-1": 0, "img-1": 1, "tumor-1": 1, "fracture-1": 1}, True),
            # Causes and effects, each followed its own way: not fracture-1 (tumor-1's
            # sibling, through pre-1 or dx-1), nor img-2 (dx-1's other cause).
            ("tumor-1", "BOTH", 10, {"tumor-1": 0, "pre-1": 1, "dx-1": 1, "img-1": 2}, False),
            ("img-2", "UPSTREAM", 5, {"img-2": 0}, False),
        ],
    )
    async def test_directions_and_depth_cut_offs(
        self,
        client: httpx2.AsyncClient,
        root: str,
        direction: str,
        depth: int,
        expected: dict[str, int],
        truncated: bool,
    ) -> None:
        answer = (await ask(client, LINEAGE, id=root, dir=direction, depth=depth, limit=100))[
            "data"
        ]["lineage"]
        assert answer["root"] == {"id": root}
        assert {n["event"]["id"]: n["depth"] for n in answer["nodes"]} == expected
        assert answer["truncated"] is truncated

    async def test_a_diamond_shows_every_path(self, client: httpx2.AsyncClient) -> None:
        answer = (await ask(client, LINEAGE, id="pre-1", dir="DOWNSTREAM", depth=5, limit=100))[
            "data"
        ]["lineage"]
        edges = {(e["cause"]["id"], e["effect"]["id"]) for e in answer["edges"]}
        assert edges == {
            ("pre-1", "tumor-1"),
            ("pre-1", "fracture-1"),
            ("tumor-1", "dx-1"),
            ("fracture-1", "dx-1"),
        }

    async def test_the_node_limit_truncates(self, client: httpx2.AsyncClient) -> None:
        answer = (await ask(client, LINEAGE, id="dx-1", dir="UPSTREAM", depth=10, limit=3))["data"][
            "lineage"
        ]
        assert len(answer["nodes"]) == 3
        assert answer["truncated"] is True

    async def test_a_limit_of_zero_still_answers_the_root(self, client: httpx2.AsyncClient) -> None:
        answer = (await ask(client, LINEAGE, id="dx-1", dir="UPSTREAM", depth=10, limit=0))["data"][
            "lineage"
        ]
        assert answer["root"] == {"id": "dx-1"}
        assert [n["event"]["id"] for n in answer["nodes"]] == ["dx-1"]
        assert answer["truncated"] is True

    async def test_types_keep_only_those_events_but_walk_through_others(
        self, client: httpx2.AsyncClient
    ) -> None:
        answer = (
            await ask(
                client,
                LINEAGE,
                id="dx-1",
                dir="UPSTREAM",
                depth=10,
                limit=100,
                types=["org.hospital.imaging.uploaded"],
            )
        )["data"]["lineage"]
        assert {n["event"]["id"] for n in answer["nodes"]} == {"dx-1", "img-1", "img-2"}
        assert {(e["cause"]["id"], e["effect"]["id"]) for e in answer["edges"]} == {
            ("img-2", "dx-1")
        }


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
        if levels <= 1024:
            assert audited["data"]["audit"]["chainVerified"] is False  # the row was forged
        else:  # not even read back (orjson reads 1,024 levels): an error, masked, no 500
            assert audited["errors"][0]["extensions"]["code"] == "INTERNAL"

    async def test_an_unknown_event_is_null(self, client: httpx2.AsyncClient) -> None:
        assert (await ask(client, '{ event(id: "nope") { id } }'))["data"] == {"event": None}

    async def test_filters_and_correlation(self, client: httpx2.AsyncClient) -> None:
        query = """{ events(filter: {modelName: "tumor-detector"}) { edges { node { id } } }
                     correlation(id: "study-42", first: 2) { edges { node { id } } } }"""
        data = (await ask(client, query))["data"]
        # The registration event is about the model too.
        assert [e["node"]["id"] for e in data["events"]["edges"]] == [
            "causeway:model:tumor-detector:3",
            "tumor-1",
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


class TestCost:
    async def test_nested_causes_and_effects_cost_a_fixed_number_of_statements(
        self, client: httpx2.AsyncClient, app: FastAPI
    ) -> None:
        query = """{ events(first: 100) { edges { node { id causes { id causes { id } }
                     effects(first: 3) { edges { node { id } } } } } } }"""
        counts = []
        for size in (5, 40):
            batch = [cloudevent()]
            batch += [cloudevent(causationid=batch[-1]["id"]) for _ in range(size - 1)]
            await client.post("/events", content=dumps(batch), headers=BATCH)
            statements: list[str] = []

            def count(*args: Any, seen: list[str] = statements) -> None:
                seen.append(args[2])

            engines = [app.state.engine.sync_engine, app.state.graphql_reads.sync_engine]
            for engine in engines:
                event.listen(engine, "before_cursor_execute", count)
            body = await ask(client, query)
            for engine in engines:
                event.remove(engine, "before_cursor_execute", count)
            assert "errors" not in body
            counts.append(len(statements))
        # At most: the key lookup, the page, causes, causes of causes, effects; here the
        # causes of causes are all on the page already, so the loader's cache answers them.
        assert counts[0] == counts[1] <= 5


class TestAnswerBudget:
    """Caps on single fields leave nesting free: effects of causes of effects multiply
    their page sizes. The answer budget bounds the whole answer."""

    HUB_EFFECTS = 10
    AMPLIFIED = """{ event(id: "hub") { effects(first: 50) { edges { node {
        causes { effects(first: 50) { edges { node { id } } } } } } } } }"""

    @pytest.fixture
    async def budgeted(self, database_url: URL, make_key: MakeKey) -> Any:
        settings = Settings(_env_file=None, graphql_max_answer_items=60)
        app = create_app(settings, database_url=database_url)
        async with asgi_client(app, await make_key("acme", "ingest,read")) as client:
            hub = [cloudevent(id="hub")]
            hub += [cloudevent(id=f"e{n}", causationid="hub") for n in range(self.HUB_EFFECTS)]
            await client.post("/events", content=dumps(hub), headers=BATCH)
            yield client
        await dispose(app)

    async def test_an_answer_past_the_budget_is_refused_once_and_whole(
        self, budgeted: httpx2.AsyncClient
    ) -> None:
        # 10 effects, each with 1 cause (the hub), each of those with 10 effects: 120 items.
        body = await ask(budgeted, self.AMPLIFIED)
        assert body["data"] is None
        [error] = body["errors"]
        assert error["extensions"]["code"] == "ANSWER_TOO_LARGE"
        assert error["extensions"]["max_answer_items"] == 60
        assert "more than 60 list items" in error["message"]

    async def test_an_answer_within_the_budget_is_whole(self, budgeted: httpx2.AsyncClient) -> None:
        # 10 edges, and the 10 effects loaded for them: 20 of 60.
        query = '{ event(id: "hub") { effects(first: 50) { edges { node { id } } } } }'
        body = await ask(budgeted, query)
        assert "errors" not in body
        assert len(body["data"]["event"]["effects"]["edges"]) == self.HUB_EFFECTS

    @pytest.mark.parametrize(
        ("selected", "refused"),
        [
            # Computed fields: graphql-core completes each edge field by field. 10 edges
            # at 2, and the 10 effects loaded: 30 of 60.
            pytest.param("id extensions model { name }", False, id="computed fields count 2"),
            # A field that awaits a load of its own under each edge: 10 at 10, past 60.
            pytest.param("causes { id }", True, id="a field that loads more counts 10"),
        ],
    )
    async def test_an_item_counts_what_it_costs(
        self, budgeted: httpx2.AsyncClient, selected: str, refused: bool
    ) -> None:
        query = (
            '{ event(id: "hub") { effects(first: 50) { edges { node { ' + selected + " } } } } }"
        )
        body = await ask(budgeted, query)
        if refused:
            assert body["data"] is None
            assert body["errors"][0]["extensions"]["code"] == "ANSWER_TOO_LARGE"
        else:
            assert "errors" not in body, body
            assert len(body["data"]["event"]["effects"]["edges"]) == self.HUB_EFFECTS

    @pytest.mark.parametrize("levels", [3, 4])
    async def test_nested_causes_past_it_are_refused_whole(
        self, database_url: URL, make_key: MakeKey, levels: int
    ) -> None:
        """Every event caused by the 20 before it: three levels of causes name 8,000
        events, four 160,000, all from one batch of loads. Fields share each loaded list,
        and the refusal stops all of them (none fails with another's cancellation)."""
        settings = Settings(_env_file=None, graphql_max_answer_items=2_000)
        app = create_app(settings, database_url=database_url)
        async with asgi_client(app, await make_key("acme", "ingest,read")) as client:
            fan = [
                cloudevent(id=f"f{n}", causationid=",".join(f"f{k}" for k in range(n - 20, n)))
                if n >= 20
                else cloudevent(id=f"f{n}")
                for n in range(100)
            ]
            response = await client.post("/events", content=dumps(fan), headers=BATCH)
            assert response.status_code == 201, response.text
            query = '{ event(id: "f99") { ' + "causes { " * levels + "id" + " }" * levels + " } }"
            response = await client.post("/graphql", json={"query": query})
        await dispose(app)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["data"] is None
        [error] = body["errors"]
        assert error["extensions"]["code"] == "ANSWER_TOO_LARGE"

    async def test_walks_count_against_it(self, budgeted: httpx2.AsyncClient) -> None:
        aliases = " ".join(
            f'l{n}: lineage(id: "hub", direction: DOWNSTREAM) {{ truncated }}' for n in range(6)
        )
        body = await ask(budgeted, "{ " + aliases + " }")  # 6 walks of 11 nodes
        assert body["errors"][0]["extensions"]["code"] == "ANSWER_TOO_LARGE"


@asynccontextmanager
async def limited(
    database_url: URL, make_key: MakeKey, **limits: Any
) -> AsyncIterator[httpx2.AsyncClient]:
    """A client of an app with ``limits`` (GraphQL settings)."""
    app = create_app(Settings(_env_file=None, **limits), database_url=database_url)
    try:
        async with asgi_client(app, await make_key("acme", "ingest,read")) as client:
            yield client
    finally:
        await dispose(app)


class TestLimits:
    @pytest.fixture
    async def tight(self, database_url: URL, make_key: MakeKey) -> Any:
        async with limited(
            database_url,
            make_key,
            graphql_max_query_depth=4,
            graphql_max_aliases=2,
            graphql_max_tokens=200,
            graphql_max_page_size=3,
            graphql_max_request_bytes=2048,
        ) as client:
            yield client

    @pytest.fixture
    async def hurried(self, database_url: URL, make_key: MakeKey) -> Any:
        async with limited(database_url, make_key, graphql_timeout_ms=1) as client:
            yield client

    async def test_first_is_capped(self, tight: httpx2.AsyncClient) -> None:
        await tight.post("/events", content=dumps([cloudevent() for _ in range(5)]), headers=BATCH)
        page = (await ask(tight, "{ events(first: 1000) { edges { cursor } } }"))["data"]
        assert len(page["events"]["edges"]) == 3

    async def test_too_deep_a_query_is_refused(self, tight: httpx2.AsyncClient) -> None:
        body = await ask(
            tight, '{ event(id: "x") { causes { causes { causes { causes { id } } } } } }'
        )
        assert "exceeds maximum operation depth" in body["errors"][0]["message"]
        assert body["errors"][0]["extensions"]["code"] == "BAD_REQUEST"

    @pytest.mark.parametrize(
        ("query", "variables"),
        [
            ("{ nope }", {}),
            ("{ event(id: ", {}),
            ("query ($p: BigInt) { events(filter: {positionFrom: $p}) { edges { cursor } } }",
             {"p": -1}),
        ],
    )  # fmt: skip
    async def test_errors_of_the_document_are_bad_requests(
        self, tight: httpx2.AsyncClient, query: str, variables: dict[str, Any]
    ) -> None:
        body = await ask(tight, query, **variables)
        assert body["errors"][0]["extensions"]["code"] == "BAD_REQUEST", body

    async def test_too_many_aliases_are_refused(self, tight: httpx2.AsyncClient) -> None:
        body = await ask(
            tight, '{ a: event(id: "x") { id } b: event(id: "y") { id } c: event(id: "z") { id } }'
        )
        assert "aliases" in body["errors"][0]["message"]

    async def test_too_many_tokens_are_refused(self, tight: httpx2.AsyncClient) -> None:
        body = await ask(
            tight, "{ " + " ".join(f'event(id: "{i}") {{ id }}' for i in range(60)) + " }"
        )
        assert "token" in body["errors"][0]["message"].lower()

    @pytest.mark.parametrize("streamed", [False, True], ids=["declared", "streamed"])
    async def test_a_request_body_past_its_cap_is_refused_before_it_is_read(
        self, tight: httpx2.AsyncClient, streamed: bool
    ) -> None:
        """Strawberry reads a whole body before it parses the query, so the cap is what
        keeps a large body out of memory: refused at a Content-Length over the cap, or
        once the bytes that arrive pass it (the rest is never read)."""
        pad = "x" * 4000
        body = dumps({"query": "{ __typename }", "variables": {"pad": pad}})
        read: list[int] = []

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(body), 1000):
                read.append(start)
                yield body[start : start + 1000]

        response = await tight.post(
            "/graphql",
            content=chunks() if streamed else body,
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 413
        assert response.headers["content-type"] == "application/problem+json"
        problem = response.json()
        assert problem["type"] == "/problems/payload-too-large"
        assert (problem["limit"], problem["max_bytes"]) == ("graphql_max_request_bytes", 2048)
        if streamed:
            assert problem["detail"].startswith("the request body is at least 3000 bytes")
            assert len(read) < len(range(0, len(body), 1000))
        small = await ask(tight, "query ($pad: ID!) { event(id: $pad) { id } }", pad=pad[:1000])
        assert small == {"data": {"event": None}}

    async def test_no_load_starts_past_the_requests_time_budget(
        self, hurried: httpx2.AsyncClient
    ) -> None:
        # Pages of effects (one query per cursor asked, one after another) are no walk:
        # a request of many ran far past the budget. 1 ms has passed once the event is read.
        cause = cloudevent()
        await hurried.post(
            "/events", content=dumps([cause, cloudevent(causationid=cause["id"])]), headers=BATCH
        )
        query = "query ($id: ID!) { event(id: $id) { effects(first: 1) { edges { cursor } } } }"
        body = await ask(hurried, query, id=cause["id"])
        assert body["data"] is None
        assert [e["extensions"]["code"] for e in body["errors"]] == ["TIMEOUT"]
        assert "the request took longer than 1 ms" in body["errors"][0]["message"]

    async def test_a_walk_past_its_time_budget_is_a_timeout_error(
        self, hurried: httpx2.AsyncClient
    ) -> None:
        chain = [cloudevent()]
        for _ in range(60):
            chain.append(cloudevent(causationid=chain[-1]["id"]))
        await hurried.post("/events", content=dumps(chain), headers=BATCH)
        body = await ask(hurried, LINEAGE, id=chain[-1]["id"], dir="UPSTREAM", depth=100, limit=100)
        assert body["errors"][0]["extensions"]["code"] == "TIMEOUT"


async def test_a_read_past_the_time_budget_is_stopped_by_postgresql(
    database_url: URL, make_key: MakeKey, engine: AsyncEngine
) -> None:
    """A read that is no walk (here, one event by id) stops at the request's time budget
    too, rather than at the main pool's 30 s statement timeout: PostgreSQL cancels it
    (here while it waits for a lock), the answer is TIMEOUT, and the connection serves
    the next request."""
    async with limited(database_url, make_key, graphql_timeout_ms=300) as client:
        stored = cloudevent()
        await client.post("/events", content=dumps([stored]), headers=BATCH)
        query = "query ($id: ID!) { event(id: $id) { id } }"
        async with engine.connect() as blocker:
            await blocker.execute(text("LOCK TABLE events IN ACCESS EXCLUSIVE MODE"))
            started = time.monotonic()
            body = await ask(client, query, id=stored["id"])
            took = time.monotonic() - started
            waiting = await blocker.scalar(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
                )
            )
            await blocker.rollback()
        assert [e["extensions"]["code"] for e in body["errors"]] == ["TIMEOUT"], body
        assert took < 5, took
        assert waiting == 0
        assert await ask(client, query, id=stored["id"]) == {
            "data": {"event": {"id": stored["id"]}}
        }


async def test_a_read_that_finds_no_connection_free_is_unavailable(
    database_url: URL, make_key: MakeKey
) -> None:
    """It waits as long as a walk would (the budget, a second at least), not 30 s, and
    the answer says so, where SQLAlchemy's pool timeout was masked as INTERNAL."""
    app = create_app(
        Settings(_env_file=None, db_pool_size=1, graphql_timeout_ms=300), database_url=database_url
    )
    engine = app.state.graphql_reads
    try:
        async with asgi_client(app, await make_key("acme", "read")) as client:
            held = [await engine.connect().start() for _ in range(11)]  # 1 and 10 more
            started = time.monotonic()
            body = await ask(client, '{ event(id: "x") { id } }')
            took = time.monotonic() - started
            for conn in held:
                await conn.close()
            assert [e["extensions"]["code"] for e in body["errors"]] == ["UNAVAILABLE"], body
            assert 0.9 < took < 5, took
            assert await ask(client, '{ event(id: "x") { id } }') == {"data": {"event": None}}
    finally:
        await dispose(app)


async def test_walks_past_their_budget_stop_in_the_server_too(
    database_url: URL, make_key: MakeKey, engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """The TIMEOUT answer comes only once PostgreSQL has stopped walking, for every walk
    of the request: no backend keeps working for an answer nobody reads, no connection
    is dropped on the way, and the next read works."""
    settings = Settings(
        _env_file=None,
        graphql_max_lineage_depth=5000,
        graphql_max_lineage_nodes=5000,
        graphql_timeout_ms=20,
    )
    app = create_app(settings, database_url=database_url)
    key = await make_key("acme", "ingest,read")
    chain = [cloudevent()]
    for _ in range(3999):
        chain.append(cloudevent(causationid=chain[-1]["id"]))
    walk = "lineage(id: $id, maxDepth: 5000, limit: 5000) { truncated }"
    four = "query ($id: ID!) { " + " ".join(f"w{i}: {walk}" for i in range(4)) + " }"
    try:
        async with asgi_client(app, key) as client:
            await client.post("/events", content=dumps(chain), headers=BATCH)
            # 4,000 levels take PostgreSQL far longer than 20 ms.
            caplog.set_level(logging.WARNING)
            for query in (LINEAGE, four):
                body = await ask(
                    client, query, id=chain[-1]["id"], dir="UPSTREAM", depth=5000, limit=5000
                )
                assert body["errors"][0]["extensions"]["code"] == "TIMEOUT"
                async with engine.connect() as conn:
                    walking = await conn.scalar(
                        text(
                            "SELECT count(*) FROM pg_stat_activity"
                            " WHERE datname = current_database() AND state = 'active'"
                            " AND query LIKE '%causeway_walk%' AND pid <> pg_backend_pid()"
                        )
                    )
                assert walking == 0
            dropped = [
                r.getMessage()
                for r in caplog.records
                if r.name.startswith(("psycopg", "sqlalchemy"))
            ]
            assert dropped == []
            logged = [r.getMessage() for r in caplog.records if r.name == "app.graphql.errors"]
            assert logged  # a 503 of the server's
            assert all(m.startswith("timeout: ") for m in logged)
            # Reads have the same 20 ms: on a busy machine one may run out of it too, which
            # is no broken connection. One that answers shows the pool works.
            for _ in range(20):
                after = await ask(
                    client, "query ($id: ID!) { event(id: $id) { id } }", id=chain[0]["id"]
                )
                if not after.get("errors"):
                    break
                assert after["errors"][0]["extensions"]["code"] == "TIMEOUT"
            assert after["data"]["event"]["id"] == chain[0]["id"]
    finally:
        await dispose(app)


async def test_walks_recover_from_a_connection_the_server_closed(
    client: httpx2.AsyncClient, engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """A restart, a failover or an idle timeout closes the walks' connections under them:
    the walk that meets a dead one fails, and the pool drops it, so later walks work."""
    caplog.set_level(logging.CRITICAL)  # the one failed walk is logged as unexpected
    sent = cloudevent()
    await client.post("/events", content=dumps([sent]), headers=BATCH)
    question = {"id": sent["id"], "dir": "UPSTREAM", "depth": 3, "limit": 10}
    assert "errors" not in await ask(client, LINEAGE, **question)
    async with engine.connect() as conn:
        killed = await conn.scalar(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query LIKE '%causeway_walk%'"
                " AND pid <> pg_backend_pid()"
            )
        )
    assert killed == 1
    answers = [await ask(client, LINEAGE, **question) for _ in range(4)]
    assert ["errors" in a for a in answers].count(True) <= 1
    assert answers[-1]["data"]["lineage"]["root"]["id"] == sent["id"]


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
