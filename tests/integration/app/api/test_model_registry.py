"""The model registry over HTTP, and its rules at ingest."""

from __future__ import annotations

import asyncio
import base64
from typing import Any, cast

import httpx2
import orjson
import pytest
from fastapi import FastAPI
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db.tables import model_aliases, model_versions, projection_checkpoints
from app.projections.status import WITHHELD
from app.store import model_registry_reads
from app.store.verify import verify_chain
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import (
    JSON,
    SIGNATURE,
    STRUCTURED,
    digest_of,
    dumps,
    event,
    registration,
)

OTHER_SIGNATURE: dict[str, Any] = {**SIGNATURE, "outputs": [{"name": "score", "type": "float"}]}


class TestRegister:
    async def test_a_version_is_registered_with_its_digest(self, admin: httpx2.AsyncClient) -> None:
        response = await admin.post(
            "/models/faces/versions", content=registration("3"), headers=JSON
        )
        assert response.status_code == 201
        assert response.json()["signature_digest"] == digest_of()
        assert digest_of().startswith("sha256:")

    async def test_the_same_registration_again_is_idempotent(
        self, admin: httpx2.AsyncClient
    ) -> None:
        first = await admin.post("/models/faces/versions", content=registration("3"), headers=JSON)
        again = await admin.post("/models/faces/versions", content=registration("3"), headers=JSON)
        assert again.status_code == 200
        assert again.json()["position"] == first.json()["position"]

    async def test_another_signature_for_a_version_is_409(self, admin: httpx2.AsyncClient) -> None:
        await admin.post("/models/faces/versions", content=registration("3"), headers=JSON)
        response = await admin.post(
            "/models/faces/versions", content=registration("3", OTHER_SIGNATURE), headers=JSON
        )
        assert response.status_code == 409
        assert response.json()["registered"] == digest_of()
        assert response.json()["sent"] == digest_of(OTHER_SIGNATURE)

    async def test_other_tags_for_a_version_are_409_in_the_registrys_terms(
        self, admin: httpx2.AsyncClient
    ) -> None:
        await admin.post("/models/faces/versions", content=registration("3"), headers=JSON)
        tagged = registration("3", tags={"team": "vision"})
        response = await admin.post("/models/faces/versions", content=tagged, headers=JSON)
        assert response.status_code == 409
        assert response.json()["type"] == "/problems/conflict"
        assert response.json()["detail"] == (
            "model 'faces' version '3' is registered with the same signature but other tags "
            "or enforce_outputs. A registration does not change: register a new version instead."
        )

    async def test_mlflow_string_specs_give_the_same_digest(
        self, admin: httpx2.AsyncClient
    ) -> None:
        as_strings = {k: dumps(v).decode() for k, v in SIGNATURE.items()}
        response = await admin.post(
            "/models/faces/versions", content=registration("3", as_strings), headers=JSON
        )
        assert response.json()["signature_digest"] == digest_of()

    async def test_a_string_spec_naming_a_member_twice_is_422(
        self, admin: httpx2.AsyncClient
    ) -> None:
        """As in a request's own JSON: ``{"type": "string", "type": "binary"}`` is refused,
        not read as its last member."""
        twice = '[{"name": "image", "type": "string", "type": "binary"}]'
        response = await admin.post(
            "/models/faces/versions",
            content=registration("3", {"inputs": twice, "outputs": "[]"}),
            headers=JSON,
        )
        assert response.status_code == 422, response.text
        assert "'type' twice" in response.text

    async def test_a_malformed_signature_is_422(self, admin: httpx2.AsyncClient) -> None:
        bad = {"inputs": [{"name": "x", "type": "complex"}], "outputs": []}
        response = await admin.post(
            "/models/faces/versions", content=registration("3", bad), headers=JSON
        )
        assert response.status_code == 422
        assert response.json()["type"] == "/problems/invalid-request"

    @pytest.mark.parametrize(
        "signature",
        [
            b'{"inputs": [], "outputs": [], "params": [{"name": "p", "type": "x", "default": 1e400}]}',
            b'{"inputs": [], "outputs": [], "params": [{"name": "p", "type": "x", "default": [1, 100000000000000000000000000000]}]}',
            b'{"inputs": [{"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": [100000000000000000000000000000]}}], "outputs": []}',
            # Deeper than event data may nest: GraphQL could not answer its signature.
            b'{"inputs": [], "outputs": [], "params": [{"name": "p", "type": "x", "default": '
            + b"[" * 129 + b"1" + b"]" * 129 + b"}]}",
        ],
    )  # fmt: skip
    async def test_numbers_a_digest_cannot_hold_are_422(
        self, admin: httpx2.AsyncClient, signature: bytes
    ) -> None:
        body = b'{"version": "1", "signature": ' + signature + b"}"
        response = await admin.post("/models/m/versions", content=body, headers=JSON)
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith("application/problem+json")

    async def test_numbers_jsonb_reads_back_otherwise_keep_chain_and_digest(
        self, admin: httpx2.AsyncClient, engine: AsyncEngine, app: FastAPI
    ) -> None:
        # -0.0 and 1.0 read back from jsonb as 0 and 1: the registration event is hashed
        # as it is stored, and `causeway verify` finds the chain intact; the digest is the
        # stored signature's, so registering what GET shows is a re-send, not a conflict.
        signature = b'{"inputs": [], "outputs": [], "params": [{"name": "p", "type": "double", "default": -0.0}, {"name": "q", "type": "double", "default": 1.0}]}'
        body = b'{"version": "1", "signature": ' + signature + b"}"
        response = await admin.post("/models/m/versions", content=body, headers=JSON)
        assert response.status_code == 201, response.text
        async with engine.connect() as conn:
            assert (await verify_chain(conn)).is_intact
        await catch_up(app)
        [shown] = (await admin.get("/models/m")).json()["versions"]
        assert [p["default"] for p in shown["signature"]["params"]] == [0, 1]
        assert response.json()["signature_digest"] == digest_of(shown["signature"])
        again = await admin.post(
            "/models/m/versions", content=registration("1", shown["signature"]), headers=JSON
        )
        assert again.status_code == 200, again.text

    @pytest.mark.parametrize(
        ("registered", "pointer"),
        [
            ({"signature": {**SIGNATURE, "inputs": [{"name": "a\u0000", "type": "string"}]}},
             "#/body/signature/inputs/0/"),
            ({"signature": {**SIGNATURE, "params": [{"name": "p", "type": "string",
                                                     "default": {"k": ["\u0000"]}}]}},
             "#/body/signature/params/0/default"),
            ({"signature": SIGNATURE, "tags": {"team": "vi\u0000sion"}}, "#/body/tags/team"),
        ],
    )  # fmt: skip
    async def test_a_nul_that_cannot_be_stored_is_422_naming_its_field(
        self, admin: httpx2.AsyncClient, registered: dict[str, Any], pointer: str
    ) -> None:
        body = dumps({"version": "1", **registered})
        response = await admin.post("/models/m/versions", content=body, headers=JSON)
        assert response.status_code == 422, response.text
        assert response.json()["detail"].startswith(pointer)
        assert "U+0000" in response.json()["detail"]

    async def test_registering_needs_the_admin_scope(self, client: httpx2.AsyncClient) -> None:
        response = await client.post(
            "/models/faces/versions", content=registration("3"), headers=JSON
        )
        assert response.status_code == 403


class TestRead:
    async def test_models_list_versions_signatures_tags_and_aliases(
        self, admin: httpx2.AsyncClient, app: FastAPI
    ) -> None:
        await admin.post(
            "/models/faces/versions",
            content=registration("3", tags={"team": "vision"}),
            headers=JSON,
        )
        await admin.post("/models/faces/versions", content=registration("4"), headers=JSON)
        alias = await admin.put(
            "/models/faces/aliases/champion", content=dumps({"version": "3"}), headers=JSON
        )
        assert alias.status_code == 200
        await catch_up(app)
        model = (await admin.get("/models/faces")).json()
        assert [v["version"] for v in model["versions"]] == ["3", "4"]
        assert model["versions"][0]["tags"] == {"team": "vision"}
        assert model["versions"][0]["signature"]["outputs"][0] == {
            "name": "score",
            "type": "double",
            "required": True,
        }
        assert model["aliases"] == {"champion": "3"}
        await admin.delete("/models/faces/aliases/champion")
        await catch_up(app)
        assert (await admin.get("/models/faces")).json()["aliases"] == {}
        assert [m["name"] for m in (await admin.get("/models")).json()["models"]] == ["faces"]

    async def test_an_alias_to_an_unregistered_version_is_404(
        self, admin: httpx2.AsyncClient
    ) -> None:
        response = await admin.put(
            "/models/faces/aliases/x", content=dumps({"version": "9"}), headers=JSON
        )
        assert response.status_code == 404

    async def test_removing_an_alias_that_points_nowhere_is_404(
        self, admin: httpx2.AsyncClient
    ) -> None:
        assert (await admin.delete("/models/nobody/aliases/prod")).status_code == 404
        await admin.post("/models/faces/versions", content=registration("3"), headers=JSON)
        put = await admin.put(
            "/models/faces/aliases/prod", content=dumps({"version": "3"}), headers=JSON
        )
        assert put.status_code == 200
        assert (await admin.delete("/models/faces/aliases/prod")).status_code == 200
        again = await admin.delete("/models/faces/aliases/prod")
        assert again.status_code == 404
        assert again.json()["detail"] == "model 'faces' has no alias 'prod'"

    async def test_removals_sent_at_once_are_one_removal(self, admin: httpx2.AsyncClient) -> None:
        await admin.post("/models/faces/versions", content=registration("3"), headers=JSON)
        for alias in ("prod", "edge", "lab"):  # a few rounds: the race is not always met
            put = await admin.put(
                f"/models/faces/aliases/{alias}", content=dumps({"version": "3"}), headers=JSON
            )
            assert put.status_code == 200
            removals = await asyncio.gather(
                *(admin.delete(f"/models/faces/aliases/{alias}") for _ in range(6))
            )
            assert {r.status_code for r in removals} <= {200, 404}
            positions = {r.json()["position"] for r in removals if r.status_code == 200}
            assert len(positions) == 1  # every 200 answers the one removal
        assert await _alias_moves(admin) == [
            (alias, version) for alias in ("prod", "edge", "lab") for version in ("3", None)
        ]

    async def test_pointing_an_alias_where_it_points_appends_nothing(
        self, admin: httpx2.AsyncClient
    ) -> None:
        await admin.post("/models/faces/versions", content=registration("3"), headers=JSON)
        await admin.post("/models/faces/versions", content=registration("4"), headers=JSON)
        body = dumps({"version": "3"})
        first = await admin.put("/models/faces/aliases/prod", content=body, headers=JSON)
        again = await asyncio.gather(
            *(admin.put("/models/faces/aliases/prod", content=body, headers=JSON) for _ in range(4))
        )
        assert {r.json()["position"] for r in again} == {first.json()["position"]}
        moved = await admin.put(
            "/models/faces/aliases/prod", content=dumps({"version": "4"}), headers=JSON
        )
        back = await admin.put("/models/faces/aliases/prod", content=body, headers=JSON)
        assert moved.status_code == back.status_code == 200
        assert await _alias_moves(admin) == [("prod", "3"), ("prod", "4"), ("prod", "3")]

    async def test_an_unknown_model_is_404(self, admin: httpx2.AsyncClient) -> None:
        assert (await admin.get("/models/nothing")).status_code == 404


class TestIngestRules:
    async def test_an_unregistered_version_is_refused(self, client: httpx2.AsyncClient) -> None:
        sent = event(modelname="faces", modelversion="7")
        response = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        assert response.status_code == 422
        assert response.json()["detail"] == "event 0: model 'faces' version '7' is not registered"

    async def test_a_signature_mismatch_shows_both_digests(
        self, client: httpx2.AsyncClient, register: Any
    ) -> None:
        await register("faces", "3")
        sent = event(modelname="faces", modelversion="3", modelsig="sha256:beef")
        response = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        assert response.status_code == 422
        assert "signature mismatch" in response.json()["detail"]
        assert "sha256:beef" in response.json()["detail"]
        assert response.json()["errors"][0]["registered"] == digest_of()

    async def test_the_registered_digest_is_accepted(
        self, client: httpx2.AsyncClient, register: Any
    ) -> None:
        await register("faces", "3")
        sent = event(modelname="faces", modelversion="3", modelsig=digest_of())
        assert (
            await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        ).status_code == 201

    @pytest.mark.parametrize(
        ("data", "status", "field"),
        [
            ({"score": 0.5, "label": "x"}, 201, None),
            ({"score": 1}, 201, None),  # an integer is a safe double
            ({"label": "x"}, 422, "data.score"),
            ({"score": "high"}, 422, "data.score"),
            ({"score": 0.5, "label": 3}, 422, "data.label"),
            ([0.5], 422, "data"),
        ],
    )
    async def test_outputs_are_checked_when_the_model_opts_in(
        self,
        client: httpx2.AsyncClient,
        admin: httpx2.AsyncClient,
        data: Any,
        status: int,
        field: str | None,
    ) -> None:
        body = registration("5", enforce_outputs=True)
        await admin.post("/models/faces/versions", content=body, headers=JSON)
        sent = event(modelname="faces", modelversion="5", data=data)
        response = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        assert response.status_code == status, response.text
        if field:
            assert response.json()["errors"][0]["attribute"] == field

    @pytest.mark.parametrize(
        ("members", "status"),
        [
            ({"data": ...}, 422),  # no data at all: the required score is missing
            ({"data": ..., "datacontenttype": "application/json",
              "data_base64": base64.b64encode(b'{"score": "high"}').decode()}, 422),
            ({"data": ..., "datacontenttype": "application/json",
              "data_base64": base64.b64encode(b'{"score": 0.5}').decode()}, 201),
            ({"data": ..., "datacontenttype": "image/png",
              "data_base64": base64.b64encode(b"\x89PNG").decode()}, 422),
        ],
    )  # fmt: skip
    async def test_outputs_are_checked_however_the_data_comes(
        self,
        client: httpx2.AsyncClient,
        admin: httpx2.AsyncClient,
        members: dict[str, Any],
        status: int,
    ) -> None:
        body = registration("5", enforce_outputs=True)
        await admin.post("/models/faces/versions", content=body, headers=JSON)
        sent = event(modelname="faces", modelversion="5", **members)
        response = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        assert response.status_code == status, response.text
        if status == 422:
            assert response.json()["errors"][0]["attribute"].startswith("data")

    @pytest.mark.parametrize("value", [2**31, 2**40, -(2**31) - 1, 2**31 - 1])
    async def test_an_integer_output_holds_32_bits(
        self, client: httpx2.AsyncClient, admin: httpx2.AsyncClient, value: int
    ) -> None:
        """MLflow's integer is 32 bits, as the rollout check has it (a rollout from integer
        to float is refused for its 32 bits): a value only a long holds is no output."""
        signature = {"inputs": SIGNATURE["inputs"], "outputs": [{"name": "n", "type": "integer"}]}
        body = registration("5", signature, enforce_outputs=True)
        await admin.post("/models/counter/versions", content=body, headers=JSON)
        sent = event(modelname="counter", modelversion="5", data={"n": value})
        response = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        if value == 2**31 - 1:
            assert response.status_code == 201, response.text
            return
        assert response.status_code == 422, response.text
        assert response.json()["errors"][0]["attribute"] == "data.n"
        assert "outside a 32-bit integer's range" in response.text

    @pytest.mark.parametrize(
        ("kind", "sent", "status"),
        [("float", b"1e300", 422), ("double", b"1e300", 422), ("integer", b"3.0", 201),
         ("integer", b"2.5", 422), ("long", b"1e20", 422), ("float", b"0.25", 201)],
    )  # fmt: skip
    async def test_json_sent_as_bytes_is_checked_as_json_data_is(
        self,
        client: httpx2.AsyncClient,
        admin: httpx2.AsyncClient,
        kind: str,
        sent: bytes,
        status: int,
    ) -> None:
        """JSON data sent as bytes (``data_base64``, a JSON ``datacontenttype``) is decoded
        for the check without passing ingest's rules for JSON data: 1e300 was an output
        of a float column there, and 3.0 no integer, the other way round from JSON data."""
        signature = {"inputs": SIGNATURE["inputs"], "outputs": [{"name": "n", "type": kind}]}
        body = registration("5", signature, enforce_outputs=True)
        await admin.post("/models/counter/versions", content=body, headers=JSON)
        data = base64.b64encode(b'{"n": ' + sent + b"}").decode()
        posted = event(
            modelname="counter", modelversion="5", data=..., data_base64=data,
            datacontenttype="application/json",
        )  # fmt: skip
        response = await client.post("/events", content=dumps(posted), headers=STRUCTURED)
        assert response.status_code == status, response.text
        if status == 422:
            assert response.json()["errors"][0]["attribute"] == "data.n"

    async def test_registrations_stay_in_their_tenant(
        self, app: FastAPI, register: Any, make_key: MakeKey
    ) -> None:
        await register("faces", "3")
        key = await make_key("globex", "ingest")
        async with httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app),
            base_url="http://c",
            headers={"Authorization": f"Bearer {key}"},
        ) as other:
            sent = event(modelname="faces", modelversion="3")
            response = await other.post("/events", content=dumps(sent), headers=STRUCTURED)
        assert response.status_code == 422


class TestGraphQL:
    async def test_models_and_the_registered_version_behind_an_event(
        self, client: httpx2.AsyncClient, register: Any, app: FastAPI
    ) -> None:
        await register("faces", "3")
        sent = event(modelname="faces", modelversion="3", modelsig=digest_of())
        await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        await catch_up(app)
        query = f"""{{ models {{ name versions {{ version signatureDigest }} }}
            model(name: "faces") {{ versions {{ signature }} }}
            event(id: "{sent["id"]}") {{ model {{ name registered {{ version signature }} }} }} }}"""
        data = (await client.post("/graphql", json={"query": query})).json()["data"]
        assert data["models"] == [
            {"name": "faces", "versions": [{"version": "3", "signatureDigest": digest_of()}]}
        ]
        signature = data["model"]["versions"][0]["signature"]
        assert signature["inputs"] == [{"name": "image", "type": "binary", "required": True}]
        assert data["event"]["model"]["registered"]["version"] == "3"
        assert data["event"]["model"]["registered"]["signature"] == signature


class _CatchesUpAfterItsFirstRead:
    """A reader's connection: once its first statement on the registry's tables has run,
    the projection catches up (as ``causeway serve`` does in the background, at any
    moment), before the next."""

    def __init__(self, conn: Any, app: FastAPI) -> None:
        self._conn, self._app, self._done = conn, app, False

    async def execute(self, statement: Any, *args: Any, **kwargs: Any) -> Any:
        result = await self._conn.execute(statement, *args, **kwargs)
        froms = {str(t) for t in getattr(statement, "get_final_froms", list)()}
        if not self._done and froms & {model_versions.name, model_aliases.name}:
            self._done = True
            rows = result.all()  # read before the projection commits, as a route reads them
            await catch_up(self._app)
            return rows
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@pytest.mark.parametrize("read", ["rest", "graphql"])
async def test_an_alias_names_a_version_the_same_answer_lists(
    admin: httpx2.AsyncClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    """Versions and aliases are two statements, each reading the read model as it is then:
    read versions first, an alias moved meanwhile to a version registered meanwhile named
    a version the answer did not list."""
    for version in ("1", "2"):
        sent = await admin.post(
            "/models/faces/versions", content=registration(version), headers=JSON
        )
        assert sent.status_code == 201, sent.text
        if version == "1":
            await catch_up(app)
    moved = await admin.put(
        "/models/faces/aliases/prod", content=dumps({"version": "2"}), headers=JSON
    )
    assert moved.status_code == 200, moved.text
    original = model_registry_reads.RegistryReader.__init__

    def reading(self: Any, conn: Any) -> None:
        original(self, cast(AsyncConnection, _CatchesUpAfterItsFirstRead(conn, app)))

    monkeypatch.setattr(model_registry_reads.RegistryReader, "__init__", reading)
    if read == "rest":
        answer = (await admin.get("/models/faces")).json()
    else:
        query = '{ model(name: "faces") { versions { version } aliases } }'
        answer = (await admin.post("/graphql", json={"query": query})).json()["data"]["model"]
    listed = [v["version"] for v in answer["versions"]]
    assert set(answer["aliases"].values()) <= set(listed), (answer["aliases"], listed)


class TestProjectionsStatus:
    async def test_status_shows_checkpoint_head_and_lag(
        self, admin: httpx2.AsyncClient, app: FastAPI, register: Any
    ) -> None:
        await register("faces", "3")
        behind, *_ = (await admin.get("/projections")).json()["projections"]
        assert behind["name"] == "model-registry"
        assert (behind["checkpoint"], behind["head"], behind["lag_events"]) == (0, 1, 1)
        await catch_up(app)
        current, deployments, drift, dispatch, tasks = (await admin.get("/projections")).json()[
            "projections"
        ]
        assert deployments["name"] == "deployments"
        assert (drift["name"], drift["lag_events"]) == ("drift", 0)
        assert (dispatch["name"], dispatch["lag_events"]) == ("scheduler-dispatch", 0)
        assert (tasks["name"], tasks["lag_events"]) == ("scheduler-tasks", 0)
        assert (current["checkpoint"], current["lag_events"], current["lag_seconds"]) == (1, 0, 0)

    async def test_an_error_text_is_shown_only_to_the_tenant_whose_event_failed(
        self, admin: httpx2.AsyncClient, app: FastAPI, engine: AsyncEngine, make_key: MakeKey
    ) -> None:
        # A projection reads every tenant's events: its error text may quote another's data.
        posted = await admin.post("/events", content=dumps(event()), headers=STRUCTURED)
        [sent] = posted.json()["events"]
        failure = {
            "last_error": "KeyError: 'acme/secret-1'",
            "error_position": sent["position"],
            "failures": 3,
        }
        async with engine.begin() as conn:
            await conn.execute(
                insert(projection_checkpoints)
                .values(name="deployments", **failure)
                .on_conflict_do_update(index_elements=["name"], set_=failure)
            )
        async with asgi_client(app, await make_key("globex", "read")) as other:
            theirs = (await other.get("/projections")).json()["projections"]
        ours = (await admin.get("/projections")).json()["projections"]
        [mine] = [p for p in ours if p["name"] == "deployments"]
        [seen] = [p for p in theirs if p["name"] == "deployments"]
        assert mine["last_error"] == "KeyError: 'acme/secret-1'"
        assert seen["last_error"] == WITHHELD
        assert (seen["error_position"], seen["failures"]) == (sent["position"], 3)


async def _alias_moves(admin: httpx2.AsyncClient) -> list[tuple[str, str | None]]:
    """Each alias move in the log, in its order: the alias and the version it pointed at."""
    replay = await admin.get("/replay", params={"types": "causeway.model.aliased"})
    moves = [orjson.loads(line)["data"] for line in replay.text.splitlines()]
    return [(m["alias"], m["version"]) for m in moves]
