"""GraphQL audits against a real PostgreSQL: a medical-imaging workflow, audited: the
sources, derived events and models behind a decision, and whether the chain holds."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx2
import psycopg
import pytest
from sqlalchemy import URL

from tests.integration.app.graphql.workflow import AUDIT, ask, ids
from tests.integration.events import BATCH, digest_of, dumps
from tests.integration.events import event as cloudevent
from tests.integration.forgery import position_of, rewrite


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


async def test_an_audit_model_shows_the_signature_its_events_name(
    client: httpx2.AsyncClient, register: Callable[..., Awaitable[None]]
) -> None:
    """A model's digest is the one its events name, whichever of them the walk meets
    first (the first may send no modelsig)."""
    await register("m", "1")
    sent = [
        cloudevent(id="src"),
        cloudevent(id="plain", causationid="src", modelname="m", modelversion="1"),
        cloudevent(
            id="signed", causationid="src", modelname="m", modelversion="1", modelsig=digest_of()
        ),
        cloudevent(id="decision", causationid="plain,signed"),
    ]
    answer = await client.post("/events", content=dumps(sent), headers=BATCH)
    assert answer.status_code == 201, answer.text
    query = '{ audit(decisionId: "decision") { models { name version signatureDigest } } }'
    [model] = (await ask(client, query))["data"]["audit"]["models"]
    assert model == {"name": "m", "version": "1", "signatureDigest": digest_of()}
