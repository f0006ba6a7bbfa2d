"""The registry takes signatures in every shape MLflow writes them: without outputs
(``infer_signature(X)``), without inputs (MLflow 2.x, a model with outputs or params
only), and with unnamed output columns (``infer_signature(X, y)`` for a plain list or an
unnamed Series), which ``enforce_outputs`` checks by position."""

from __future__ import annotations

import base64
from typing import Any

import httpx2
import pytest
from fastapi import FastAPI

from tests.integration.conftest import catch_up
from tests.integration.events import JSON, STRUCTURED, dumps, event, registration

# As MLflow writes a tensor input into an MLmodel file: a JSON string.
INPUTS = '[{"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": [-1, 4]}}]'
# A signature with every part filled, and the digest the registry gave it before inputs
# and outputs could be left out: a digest, once given, never changes.
FULL: dict[str, Any] = {
    "inputs": INPUTS,
    "outputs": [
        {"name": "score", "type": "double"},
        {"name": "label", "type": "string", "required": False},
        {"type": "long"},
    ],
    "params": [{"name": "temperature", "type": "float", "default": 0.5, "shape": None}],
}
FULL_DIGEST = "sha256:43ec501f27ed41cc2a1d24f569fdf4da2fb2bc99e28708498e133ccbff882c3a"
# README's example registration, with the digest it shows.
README: dict[str, Any] = {
    "inputs": [{"name": "frame", "type": "binary"}],
    "outputs": [{"name": "person", "type": "string"}, {"name": "score", "type": "double"}],
}
README_DIGEST = "sha256:a96721e80b110a896eb6cb9cfa5947817dd7460e90782f0f6307906fcb15393c"


async def _register(
    admin: httpx2.AsyncClient, name: str, version: str, signature: dict[str, Any], **extra: Any
) -> httpx2.Response:
    body = registration(version, signature, **extra)
    return await admin.post(f"/models/{name}/versions", content=body, headers=JSON)


async def _send(client: httpx2.AsyncClient, name: str, **members: Any) -> httpx2.Response:
    sent = event(modelname=name, modelversion="1", **members)
    return await client.post("/events", content=dumps(sent), headers=STRUCTURED)


class TestSignaturesMlflowWrites:
    @pytest.mark.parametrize(
        "signature",
        [
            # ModelSignature.to_dict() of infer_signature(X): "outputs": null
            {"inputs": INPUTS, "outputs": None, "params": None},
            # older MLmodel files and hand-written signatures leave it out
            {"inputs": INPUTS},
            # MLflow 2.x writes "inputs": null for a model with outputs (or params) only
            {"inputs": None, "outputs": [{"type": "double"}], "params": None},
            {"params": [{"name": "temperature", "type": "float", "default": 0.5}]},
        ],
    )
    async def test_a_signature_without_inputs_or_outputs_registers(
        self, admin: httpx2.AsyncClient, signature: dict[str, Any]
    ) -> None:
        response = await _register(admin, "iris", "1", signature)
        assert response.status_code == 201, response.text

    async def test_a_signature_with_nothing_in_it_is_422(self, admin: httpx2.AsyncClient) -> None:
        # MLflow refuses one too: "At least one of inputs, outputs or params must be provided".
        for signature in ({}, {"inputs": None, "outputs": None, "params": None}):
            response = await _register(admin, "iris", "1", signature)
            assert response.status_code == 422, response.text

    async def test_null_and_absent_are_one_signature_shown_as_absent(
        self, admin: httpx2.AsyncClient, app: FastAPI
    ) -> None:
        first = await _register(admin, "iris", "1", {"inputs": INPUTS, "outputs": None})
        again = await _register(admin, "iris", "1", {"inputs": INPUTS})
        assert first.status_code == 201, first.text
        assert again.status_code == 200, again.text  # a re-send: the same digest
        assert again.json()["signature_digest"] == first.json()["signature_digest"]
        await catch_up(app)
        shown = (await admin.get("/models/iris")).json()["versions"][0]["signature"]
        assert "outputs" not in shown
        # What GET shows, registered again, is the same registration.
        assert (await _register(admin, "iris", "1", shown)).status_code == 200

    @pytest.mark.parametrize(
        ("signature", "digest"), [(FULL, FULL_DIGEST), (README, README_DIGEST)]
    )
    async def test_a_digest_given_before_stays_the_same(
        self, admin: httpx2.AsyncClient, signature: dict[str, Any], digest: str
    ) -> None:
        response = await _register(admin, "iris", "1", signature)
        assert response.status_code == 201, response.text
        assert response.json()["signature_digest"] == digest


class TestAbsentIsEmpty:
    async def test_enforced_outputs_that_were_never_given_check_nothing(
        self, admin: httpx2.AsyncClient, client: httpx2.AsyncClient
    ) -> None:
        registered = await _register(admin, "iris", "1", {"inputs": INPUTS}, enforce_outputs=True)
        assert registered.status_code == 201, registered.text
        response = await _send(client, "iris", data={"anything": "at all"})
        assert response.status_code == 201, response.text

    @pytest.mark.parametrize(
        ("stable", "candidate", "status"),
        [
            ({"outputs": [{"type": "double"}]}, {"inputs": [{"name": "x", "type": "double"}]}, 409),
            ({"inputs": [{"name": "x", "type": "double"}]}, {"outputs": [{"type": "double"}]}, 200),
            ({"outputs": [{"type": "double"}]}, {"outputs": [{"type": "long"}]}, 200),
        ],
    )
    async def test_a_rollout_reads_absent_inputs_as_none(
        self,
        admin: httpx2.AsyncClient,
        stable: dict[str, Any],
        candidate: dict[str, Any],
        status: int,
    ) -> None:
        for version, signature in (("1", stable), ("2", candidate)):
            response = await _register(admin, "m", version, signature)
            assert response.status_code == 201, response.text
        rollout = dumps({"model": "m", "version": "1"})
        await admin.post("/deployments/gate/rollouts", content=rollout, headers=JSON)
        await admin.post("/deployments/gate/promote", content=b"{}", headers=JSON)
        rollout = dumps({"model": "m", "version": "2", "percent": 10})
        answer = await admin.post("/deployments/gate/rollouts", content=rollout, headers=JSON)
        assert answer.status_code == status, answer.text
        if status == 409:
            assert "requires input 'x', which callers do not send" in answer.json()["detail"]


ONE_DOUBLE = {"inputs": [{"name": "x", "type": "double"}], "outputs": [{"type": "double"}]}


class TestUnnamedOutputs:
    @pytest.mark.parametrize(
        ("members", "status"),
        [
            ({"data": "not a number"}, 422),
            ({"data": True}, 422),
            ({"data": {"score": 0.5}}, 422),
            ({"data": ...}, 422),  # no data: the one required output is missing
            ({"data": None}, 422),
            ({"data": [0.5, "high"]}, 422),
            ({"data": [0.5, None]}, 422),
            ({"data": 0.5}, 201),
            ({"data": 3}, 201),
            ({"data": [0.5, 3, -1.25]}, 201),  # a batch of predictions
            ({"data": []}, 201),
        ],
    )
    async def test_one_unnamed_column_is_the_data_or_each_item_of_it(
        self,
        admin: httpx2.AsyncClient,
        client: httpx2.AsyncClient,
        members: dict[str, Any],
        status: int,
    ) -> None:
        registered = await _register(admin, "price", "1", ONE_DOUBLE, enforce_outputs=True)
        assert registered.status_code == 201, registered.text
        response = await _send(client, "price", **members)
        assert response.status_code == status, response.text
        if status == 422:
            assert response.json()["errors"][0]["attribute"] == "data"

    async def test_an_unnamed_integer_holds_32_bits(
        self, admin: httpx2.AsyncClient, client: httpx2.AsyncClient
    ) -> None:
        signature = {"inputs": [{"name": "x", "type": "double"}], "outputs": [{"type": "integer"}]}
        await _register(admin, "count", "1", signature, enforce_outputs=True)
        response = await _send(client, "count", data=2**31)
        assert response.status_code == 422, response.text
        assert "outside a 32-bit integer's range" in response.json()["errors"][0]["detail"]
        assert (await _send(client, "count", data=2**31 - 1)).status_code == 201

    @pytest.mark.parametrize(
        ("data", "status", "detail"),
        [
            ([0.5, "cat"], 201, None),
            ([0.5], 201, None),  # the optional second output left out
            ([0.5, None], 201, None),
            (["cat", 0.5], 422, "output #0 must be double, got str"),
            ([None, "cat"], 422, "required output #0 is missing"),
            ([0.5, "cat", 1], 422, "data has 3 values, the model has 2 outputs"),
            (0.5, 422, "so data must be a JSON array"),
            ({"0": 0.5}, 422, "so data must be a JSON array"),
        ],
    )
    async def test_several_unnamed_columns_are_matched_by_position(
        self,
        admin: httpx2.AsyncClient,
        client: httpx2.AsyncClient,
        data: Any,
        status: int,
        detail: str | None,
    ) -> None:
        outputs = [{"type": "double"}, {"type": "string", "required": False}]
        signature = {"inputs": [{"name": "x", "type": "double"}], "outputs": outputs}
        await _register(admin, "pair", "1", signature, enforce_outputs=True)
        response = await _send(client, "pair", data=data)
        assert response.status_code == status, response.text
        if detail is not None:
            assert detail in response.json()["errors"][0]["detail"]

    async def test_named_columns_are_still_checked_by_name(
        self, admin: httpx2.AsyncClient, client: httpx2.AsyncClient
    ) -> None:
        await _register(admin, "iris", "1", FULL, enforce_outputs=True)
        assert (await _send(client, "iris", data={"score": 0.5})).status_code == 201
        refused = await _send(client, "iris", data={"score": "high"})
        assert refused.status_code == 422, refused.text
        assert refused.json()["errors"][0]["attribute"] == "data.score"


async def _registered_captioner(admin: httpx2.AsyncClient, kind: str) -> None:
    signature = {"inputs": [{"type": "string"}], "outputs": [{"type": kind}]}
    body = registration("1", signature, enforce_outputs=True)
    response = await admin.post("/models/captioner/versions", content=body, headers=JSON)
    assert response.status_code == 201, response.text


def _binary_headers(content_type: str, n: int) -> dict[str, str]:
    return {
        "Content-Type": content_type,
        "ce-specversion": "1.0",
        "ce-id": f"caption-{n}",
        "ce-source": "/captioner",
        "ce-type": "com.example.caption.v1",
        "ce-modelname": "captioner",
        "ce-modelversion": "1",
    }


async def test_a_text_output_is_taken_in_every_mode(admin: httpx2.AsyncClient) -> None:
    """From a review: one unnamed column's value sent in binary mode (text, or an image
    as its bytes) was read as no data, and refused as a missing output."""
    await _registered_captioner(admin, "string")
    structured = event(
        id="caption-1", source="/captioner", type="com.example.caption.v1",
        modelname="captioner", modelversion="1",
        datacontenttype="text/plain", data="a dog on a beach",
    )  # fmt: skip
    first = await admin.post("/events", content=dumps(structured), headers=STRUCTURED)
    assert first.status_code == 201, first.text
    binary = await admin.post(
        "/events", content=b"a cat on a sofa", headers=_binary_headers("text/plain", 2)
    )
    assert binary.status_code == 201, binary.text


async def test_a_binary_output_sent_as_bytes_is_taken(admin: httpx2.AsyncClient) -> None:
    await _registered_captioner(admin, "binary")
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
    sent = await admin.post("/events", content=png, headers=_binary_headers("image/png", 3))
    assert sent.status_code == 201, sent.text


async def test_data_that_is_not_the_outputs_type_is_refused(admin: httpx2.AsyncClient) -> None:
    await _registered_captioner(admin, "double")
    text = await admin.post("/events", content=b"3.5", headers=_binary_headers("text/plain", 4))
    assert text.status_code == 422, text.text
    assert "must be double, got str" in text.text  # as the JSON string "3.5" would be
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
    image = await admin.post("/events", content=png, headers=_binary_headers("image/png", 5))
    assert image.status_code == 422, image.text
    assert "must be double, got bytes" in image.text


async def _registered_one(admin: httpx2.AsyncClient, name: str, column: dict[str, Any]) -> None:
    signature = {"inputs": [{"type": "string"}], "outputs": [column]}
    body = registration("1", signature, enforce_outputs=True)
    response = await admin.post(f"/models/{name}/versions", content=body, headers=JSON)
    assert response.status_code == 201, response.text


def _binary_headers_of(name: str, content_type: str, id_: str) -> dict[str, str]:
    return {
        "Content-Type": content_type,
        "ce-specversion": "1.0",
        "ce-id": id_,
        "ce-source": "/captioner",
        "ce-type": "com.example.caption.v1",
        "ce-modelname": name,
        "ce-modelversion": "1",
    }


async def test_the_same_text_output_is_taken_in_every_mode_for_a_binary_column(
    admin: httpx2.AsyncClient,
) -> None:
    """From a review: the store holds text of a non-JSON type alike in both modes (a
    re-send in the other mode is a duplicate), yet a binary column took it in binary mode
    only, and a datetime one (below) in structured mode only."""
    await _registered_one(admin, "thumb", {"type": "binary"})
    binary = await admin.post(
        "/events", content=b"hello world", headers=_binary_headers_of("thumb", "text/plain", "b-1")
    )
    assert binary.status_code == 201, binary.text
    structured = event(
        id="b-2", source="/captioner", type="com.example.caption.v1",
        modelname="thumb", modelversion="1", datacontenttype="text/plain", data="hello world",
    )  # fmt: skip
    sent = await admin.post("/events", content=dumps(structured), headers=STRUCTURED)
    assert sent.status_code == 201, sent.text


async def test_an_optional_column_judges_text_alike_in_every_mode(
    admin: httpx2.AsyncClient,
) -> None:
    """Text of another type is checked as the string it is, in both modes (structured mode
    refused it before, binary mode took it as no value); bytes that are no text are no
    value, which an optional column allows."""
    await _registered_one(admin, "opt", {"type": "double", "required": False})
    text = await admin.post(
        "/events", content=b"not a number", headers=_binary_headers_of("opt", "text/plain", "o-1")
    )
    assert text.status_code == 422, text.text
    assert "must be double, got str" in text.text
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
    image = await admin.post(
        "/events", content=png, headers=_binary_headers_of("opt", "image/png", "o-2")
    )
    assert image.status_code == 201, image.text


async def test_data_base64_without_a_content_type_is_a_binary_columns_value(
    admin: httpx2.AsyncClient,
) -> None:
    """README: data sent as bytes that are not JSON, as data_base64, is a binary column's
    value."""
    await _registered_one(admin, "png", {"type": "binary"})
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
    structured = event(
        id="p-1", source="/captioner", type="com.example.caption.v1",
        modelname="png", modelversion="1", data_base64=base64.b64encode(png).decode(),
    )  # fmt: skip
    structured.pop("data", None)
    structured.pop("datacontenttype", None)
    sent = await admin.post("/events", content=dumps(structured), headers=STRUCTURED)
    assert sent.status_code == 201, sent.text


async def test_the_same_text_output_is_taken_in_every_mode_for_a_datetime_column(
    admin: httpx2.AsyncClient,
) -> None:
    """The reverse: structured mode's text is checked as a value, binary mode's as bytes."""
    await _registered_one(admin, "when", {"type": "datetime"})
    stamp = "2026-01-02T03:04:05Z"
    structured = event(
        id="d-1", source="/captioner", type="com.example.caption.v1",
        modelname="when", modelversion="1", datacontenttype="text/plain", data=stamp,
    )  # fmt: skip
    first = await admin.post("/events", content=dumps(structured), headers=STRUCTURED)
    assert first.status_code == 201, first.text
    binary = await admin.post(
        "/events", content=stamp.encode(), headers=_binary_headers_of("when", "text/plain", "d-2")
    )
    assert binary.status_code == 201, binary.text
