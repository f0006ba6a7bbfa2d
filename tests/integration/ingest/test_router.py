"""POST /events in each binding mode, and every way it refuses bad input.

Each test that takes ``client`` runs on two faces of the app: through ASGI, and over a
real connection to the app served by uvicorn, as ``causeway serve`` serves it. The answers
must not differ.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx2
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from app.main import create_app, dispose
from app.settings import Settings
from tests.in_process import serving
from tests.integration import asgi
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import BATCH, STRUCTURED, causes_of, dumps, event

Connect = Callable[[str | None], AbstractAsyncContextManager[httpx2.AsyncClient]]


@pytest.fixture(params=["asgi", "served"])
async def connect(request: pytest.FixtureRequest, app: FastAPI) -> AsyncIterator[Connect]:
    """Clients of ``app`` with a key (or none), on the face the test runs on."""
    if request.param == "asgi":

        def through_asgi(key: str | None) -> AbstractAsyncContextManager[httpx2.AsyncClient]:
            return _client(httpx2.ASGITransport(app=app), "http://causeway", key)

        yield through_asgi
        return
    async with serving(app, lifespan="off") as port:

        def over_a_socket(key: str | None) -> AbstractAsyncContextManager[httpx2.AsyncClient]:
            return _client(None, f"http://127.0.0.1:{port}", key)

        yield over_a_socket


@asynccontextmanager
async def _client(
    transport: httpx2.AsyncBaseTransport | None, base: str, key: str | None
) -> AsyncIterator[httpx2.AsyncClient]:
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(transport=transport, base_url=base, headers=headers) as client:
        yield client


@pytest.fixture
async def client(connect: Connect, make_key: MakeKey) -> AsyncIterator[httpx2.AsyncClient]:
    """A client of tenant ``acme`` with the ingest and read scopes, on the test's face."""
    async with connect(await make_key("acme", "ingest,read")) as client:
        yield client


def problem_type(response: httpx2.Response) -> str:
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    return str(body["type"])


class TestStructuredMode:
    async def test_an_event_is_stored_and_read_back_with_its_position(
        self, client: httpx2.AsyncClient
    ) -> None:
        sent = event(subject="gate-1", time="2026-11-30T12:00:00.123456789Z", traceparent="00-x")
        response = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        assert response.status_code == 201
        [entry] = response.json()["events"]
        assert entry == {
            "id": sent["id"],
            "source": "/cameras/gate",
            "stream": "gate-1",
            "stream_version": 1,
            "position": 1,
            "duplicate": False,
        }
        stored = (await client.get(f"/events/{sent['id']}")).json()
        assert stored["time"] == "2026-11-30T12:00:00.123456789Z"
        assert stored["data"] == {"frame": 1}
        assert stored["traceparent"] == "00-x"
        assert stored["position"] == 1
        assert stored["streamversion"] == 1
        assert len(stored["hash"]) == 64
        assert stored["storedtime"].endswith("Z")

    async def test_time_with_an_offset_round_trips_exactly(
        self, client: httpx2.AsyncClient
    ) -> None:
        sent = event(time="2026-11-30T12:00:00.5+00:00")
        await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        stored = (await client.get(f"/events/{sent['id']}")).json()
        assert stored["time"] == "2026-11-30T12:00:00.5+00:00"

    async def test_stream_defaults_to_source_without_subject(
        self, client: httpx2.AsyncClient
    ) -> None:
        response = await client.post("/events", content=dumps(event()), headers=STRUCTURED)
        assert response.json()["events"][0]["stream"] == "/cameras/gate"

    async def test_explicit_null_data_differs_from_no_data(
        self, client: httpx2.AsyncClient
    ) -> None:
        with_null, without = event(data=None), event(data=...)
        await client.post("/events", content=dumps([with_null, without]), headers=BATCH)
        assert (await client.get(f"/events/{with_null['id']}")).json()["data"] is None
        assert "data" not in (await client.get(f"/events/{without['id']}")).json()

    async def test_data_base64_is_stored_as_bytes(self, client: httpx2.AsyncClient) -> None:
        sent = event(data=..., data_base64="AAEC", datacontenttype="application/octet-stream")
        assert (
            await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        ).status_code == 201
        stored = (await client.get(f"/events/{sent['id']}")).json()
        assert stored["data_base64"] == "AAEC"
        assert "data" not in stored

    @pytest.mark.parametrize(
        ("change", "attribute"),
        [
            ({"id": ...}, "id"),
            ({"source": ""}, "source"),
            ({"type": ...}, "type"),
            ({"specversion": "0.3"}, "specversion"),
            ({"Bad_Name": "x"}, "Bad_Name"),
            ({"time": "yesterday"}, "time"),
            ({"data_base64": "AA=="}, "data"),
            ({"nested": {"a": 1}}, "nested"),
            ({"position": 5}, "position"),
            ({"subject": "line\nbreak"}, "subject"),
        ],
    )
    async def test_malformed_events_get_400_naming_the_attribute(
        self, client: httpx2.AsyncClient, change: dict[str, Any], attribute: str
    ) -> None:
        response = await client.post("/events", content=dumps(event(**change)), headers=STRUCTURED)
        assert response.status_code == 400
        assert problem_type(response) == "/problems/invalid-cloudevent"
        assert response.json()["errors"][0]["attribute"] == attribute

    async def test_malformed_json_is_400(self, client: httpx2.AsyncClient) -> None:
        response = await client.post("/events", content=b"{not json", headers=STRUCTURED)
        assert response.status_code == 400
        assert problem_type(response) == "/problems/invalid-json"

    async def test_an_unsupported_format_is_415(self, client: httpx2.AsyncClient) -> None:
        response = await client.post(
            "/events", content=b"x", headers={"Content-Type": "application/cloudevents+avro"}
        )
        assert response.status_code == 415
        assert problem_type(response) == "/problems/unsupported-media-type"

    async def test_reserved_types_are_refused(self, client: httpx2.AsyncClient) -> None:
        sent = event(type="causeway.task.created")
        response = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        assert response.status_code == 422
        assert problem_type(response) == "/problems/reserved-type"

    # A plain CloudEvent on a dataset's stream, of a version's type, was stored: it showed
    # in audits as a version of training data, and (its data of another shape) failed
    # every dataset query of the tenant with INTERNAL.
    @pytest.mark.parametrize(
        ("attributes", "named"),
        [
            ({"stream": "openlineage:dataset:s3%3A//lake:features"}, "stream"),
            ({"subject": "openlineage:run:0190a3e2-5b8c-7d4e-9f00-0123456789ab"}, "subject"),
            ({"id": "openlineage:version:ab12"}, "id"),
        ],
        ids=["stream", "stream-from-subject", "id"],
    )
    async def test_openlineages_ids_and_streams_are_refused(
        self, client: httpx2.AsyncClient, attributes: dict[str, str], named: str
    ) -> None:
        sent = event(type="io.openlineage.dataset.version", data=["forged"], **attributes)
        response = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        assert response.status_code == 422, response.text
        assert problem_type(response) == "/problems/reserved-type"
        [error] = response.json()["errors"]
        assert error["attribute"] == named
        assert "belong to the events POST /api/v1/lineage writes" in error["detail"]

    async def test_nul_characters_in_data_are_refused_not_a_500(
        self, client: httpx2.AsyncClient
    ) -> None:
        response = await client.post(
            "/events", content=dumps(event(data={"k": "a\u0000b"})), headers=STRUCTURED
        )
        assert response.status_code == 422
        assert problem_type(response) == "/problems/invalid-event"


class TestLimits:
    async def test_attributes_over_the_control_plane_limit_are_422(
        self, client: httpx2.AsyncClient
    ) -> None:
        response = await client.post(
            "/events", content=dumps(event(note="x" * 1100)), headers=STRUCTURED
        )
        assert response.status_code == 422
        assert problem_type(response) == "/problems/event-too-large"
        assert "1024-byte limit by" in response.json()["detail"]

    async def test_data_over_the_event_limit_is_422(self, client: httpx2.AsyncClient) -> None:
        response = await client.post(
            "/events", content=dumps(event(data="x" * (1 << 20))), headers=STRUCTURED
        )
        assert response.status_code == 422
        assert response.json()["errors"][0]["attribute"] == "data"
        assert "limit by 2" in response.json()["detail"]  # the JSON string's two quotes

    # max_event_data_bytes is data as compact JSON, as structured mode measures it;
    # binary mode counted the body's bytes, its white space too.
    async def test_binary_mode_measures_json_data_compact_as_structured_mode_does(
        self, client: httpx2.AsyncClient
    ) -> None:
        data = {"values": list(range(150_000))}
        assert len(dumps(data)) < 1 << 20 < len(json.dumps(data, indent=1))
        sent = event(data=data)
        structured = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        assert structured.status_code == 201, structured.text
        binary = {
            f"ce-{k}": v for k, v in event().items() if k in ("specversion", "source", "type")
        }
        response = await client.post(
            "/events",
            content=json.dumps(data, indent=1).encode(),
            headers={**binary, "ce-id": "indented", "Content-Type": "application/json"},
        )
        assert response.status_code == 201, response.text

    async def test_a_one_event_body_past_what_one_event_takes_as_sent_says_so(
        self, client: httpx2.AsyncClient
    ) -> None:
        """Indented JSON of small values nested deep: its data is within the limit
        compact, its body past the bound on one event's body as sent; a batch takes it."""
        sent = event(data=[[0]] * 200_000)
        indented = json.dumps(sent, indent=4).encode()
        alone = await client.post("/events", content=indented, headers=STRUCTURED)
        assert alone.status_code == 422
        assert alone.json()["detail"] == (
            f"the event's body is {len(indented)} bytes, over the 4204544 one event's body "
            "may take as sent (CAUSEWAY_MAX_EVENT_DATA_BYTES four times over, with the "
            "attributes'): send its JSON compact, or as a batch of one"
        )
        batch = json.dumps([sent], indent=4).encode()
        assert (await client.post("/events", content=batch, headers=BATCH)).status_code == 201

    async def test_a_body_over_the_request_limit_is_413(self, client: httpx2.AsyncClient) -> None:
        body = dumps([event(data="x" * 900_000) for _ in range(19)])
        response = await client.post("/events", content=body, headers=BATCH)
        assert response.status_code == 413
        assert problem_type(response) == "/problems/payload-too-large"
        assert "16777216-byte limit" in response.json()["detail"]


class TestBatchMode:
    async def test_an_empty_batch_is_accepted(self, client: httpx2.AsyncClient) -> None:
        response = await client.post("/events", content=b"[]", headers=BATCH)
        assert response.status_code == 200
        assert response.json() == {"events": []}

    async def test_a_batch_is_stored_in_order(self, client: httpx2.AsyncClient) -> None:
        batch = [event(), event(), event()]
        response = await client.post("/events", content=dumps(batch), headers=BATCH)
        assert response.status_code == 201
        assert [e["position"] for e in response.json()["events"]] == [1, 2, 3]
        assert [e["stream_version"] for e in response.json()["events"]] == [1, 2, 3]

    async def test_one_bad_event_rejects_the_whole_batch_naming_each(
        self, client: httpx2.AsyncClient
    ) -> None:
        batch = [event(), event(id=""), event(), event(type=...)]
        response = await client.post("/events", content=dumps(batch), headers=BATCH)
        assert response.status_code == 400
        errors = response.json()["errors"]
        assert [(e["index"], e["attribute"]) for e in errors] == [(1, "id"), (3, "type")]
        replay = await client.get("/replay")
        assert replay.text == ""

    async def test_a_conflict_late_in_a_batch_writes_nothing(
        self, client: httpx2.AsyncClient
    ) -> None:
        first = event(subject="s")
        await client.post("/events", content=dumps(first), headers=STRUCTURED)
        batch = [event(subject="t"), event(subject="s", expectedversion=0)]
        response = await client.post("/events", content=dumps(batch), headers=BATCH)
        assert response.status_code == 409
        assert (await client.get(f"/events/{batch[0]['id']}")).status_code == 404


_CODED = {"Content-Encoding": "gzip"}


class TestBinaryMode:
    async def test_headers_are_percent_decoded_once(self, client: httpx2.AsyncClient) -> None:
        headers = {
            "ce-specversion": "1.0",
            "ce-id": "bin-1",
            "ce-source": "/s",
            "ce-type": "com.example.t",
            "ce-subject": "Euro%20%E2%82%AC%20%F0%9F%98%80",
            "ce-note": "100%2525",
            "Content-Type": "application/json",
        }
        response = await client.post("/events", content=b'{"a": 1}', headers=headers)
        assert response.status_code == 201
        stored = (await client.get("/events/bin-1")).json()
        assert stored["subject"] == "Euro € 😀"
        assert stored["note"] == "100%25"
        assert stored["data"] == {"a": 1}
        assert stored["datacontenttype"] == "application/json"

    @pytest.mark.parametrize("coding", ["gzip", "br", "x-unknown"])
    async def test_a_body_in_a_content_encoding_is_refused_not_stored_encoded(
        self, client: httpx2.AsyncClient, coding: str
    ) -> None:
        """Content-Encoding was not looked at: a gzip body was stored as the event's data,
        the compressed bytes, for good."""
        headers = {
            "ce-specversion": "1.0",
            "ce-id": f"coded-{coding}",
            "ce-source": "/s",
            "ce-type": "t",
            "Content-Type": "application/octet-stream",
            "Content-Encoding": coding,
        }
        response = await client.post("/events", content=gzip.compress(b"hello"), headers=headers)
        assert response.status_code == 415, response.text
        assert response.json()["type"] == "/problems/unsupported-content-encoding"
        assert (await client.get(f"/events/coded-{coding}")).status_code == 404
        # The same for every body the service reads (the JSON routes, GraphQL); identity
        # is the absence of a coding.
        graphql = await client.post(
            "/graphql", content=b"{}", headers={"Content-Type": "application/json", **_CODED}
        )
        assert graphql.status_code == 415
        plain = {**headers, "ce-id": "identity", "Content-Encoding": "identity"}
        assert (await client.post("/events", content=b"x", headers=plain)).status_code == 201

    async def test_non_json_bodies_are_kept_as_bytes(self, client: httpx2.AsyncClient) -> None:
        headers = {
            "ce-specversion": "1.0",
            "ce-id": "bin-2",
            "ce-source": "/s",
            "ce-type": "t",
            "Content-Type": "image/png",
        }
        await client.post("/events", content=b"\x89PNG\x00", headers=headers)
        stored = (await client.get("/events/bin-2")).json()
        assert stored["data_base64"] == "iVBORwA="
        assert stored["datacontenttype"] == "image/png"

    async def test_an_event_without_content_type_is_accepted(
        self, client: httpx2.AsyncClient
    ) -> None:
        headers = {"ce-specversion": "1.0", "ce-id": "bin-3", "ce-source": "/s", "ce-type": "t"}
        response = await client.post("/events", content=b'{"x":1}', headers=headers)
        assert response.status_code == 201
        stored = (await client.get("/events/bin-3")).json()
        assert "datacontenttype" not in stored
        assert stored["data_base64"] == "eyJ4IjoxfQ=="

    async def test_an_id_with_slashes_reads_back(self, client: httpx2.AsyncClient) -> None:
        sent = event(id="cam/1/frame")
        assert (await client.post("/events", content=dumps(sent), headers=STRUCTURED)).is_success
        assert (await client.get("/events/cam%2F1%2Fframe")).json()["id"] == "cam/1/frame"
        assert (await client.get("/events/cam/1/frame")).json()["id"] == "cam/1/frame"
        missing = await client.get("/events/cam/2")
        assert missing.status_code == 404
        assert "no event with id 'cam/2'" in missing.json()["detail"]

    async def test_invalid_utf8_in_a_header_is_400(self, client: httpx2.AsyncClient) -> None:
        headers = {
            "ce-specversion": "1.0",
            "ce-id": "bin-4",
            "ce-source": "/s",
            "ce-type": "t",
            "ce-subject": "%C0%A0",
        }
        response = await client.post("/events", content=b"x", headers=headers)
        assert response.status_code == 400
        assert response.json()["errors"][0]["attribute"] == "subject"

    async def test_ce_datacontenttype_is_400(self, client: httpx2.AsyncClient) -> None:
        headers = {
            "ce-specversion": "1.0",
            "ce-id": "bin-5",
            "ce-source": "/s",
            "ce-type": "t",
            "ce-datacontenttype": "text/plain",
        }
        response = await client.post("/events", content=b"x", headers=headers)
        assert response.status_code == 400
        assert response.json()["errors"][0]["attribute"] == "datacontenttype"

    async def test_missing_required_headers_are_400(self, client: httpx2.AsyncClient) -> None:
        headers = {"ce-specversion": "1.0", "ce-id": "bin-6", "Content-Type": "text/plain"}
        response = await client.post("/events", content=b"x", headers=headers)
        assert response.status_code == 400
        assert {e["attribute"] for e in response.json()["errors"]} == {"source", "type"}

    async def test_no_cloudevent_at_all_is_415(self, client: httpx2.AsyncClient) -> None:
        response = await client.post(
            "/events", content=b"x", headers={"Content-Type": "text/plain"}
        )
        assert response.status_code == 415


class TestIdempotency:
    async def test_a_resend_returns_200_and_the_original_position(
        self, client: httpx2.AsyncClient
    ) -> None:
        sent = event()
        first = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        again = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        assert again.status_code == 200
        assert again.json()["events"][0]["position"] == first.json()["events"][0]["position"]
        assert again.json()["events"][0]["duplicate"] is True
        assert len((await client.get("/replay")).text.splitlines()) == 1

    async def test_the_same_key_with_other_content_is_409(self, client: httpx2.AsyncClient) -> None:
        sent = event()
        await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        changed = {**sent, "data": {"frame": 2}}
        response = await client.post("/events", content=dumps(changed), headers=STRUCTURED)
        assert response.status_code == 409
        assert problem_type(response) == "/problems/id-conflict"

    @pytest.mark.parametrize(
        ("first", "again"),
        [
            # CloudEvents: JSON data with no datacontenttype is application/json data.
            (
                (STRUCTURED, {"data": {"a": 1}}),
                (STRUCTURED, {"data": {"a": 1}, "datacontenttype": "application/json"}),
            ),
            # json-format.md's examples and their binary-mode encodings.
            (
                (STRUCTURED, {"data": "I'm just a string"}),
                ({"Content-Type": "application/json"}, b'"I\'m just a string"'),
            ),
            (
                (STRUCTURED, {"datacontenttype": "application/xml", "data": '<much wow="xml"/>'}),
                ({"Content-Type": "application/xml"}, b'<much wow="xml"/>'),
            ),
            (
                (STRUCTURED, {"comexampleothervalue": 5, "urgent": True}),
                ({"ce-comexampleothervalue": "5", "ce-urgent": "true"}, b""),
            ),
            # JSON sent as bytes (data_base64) is the JSON it holds: it was compared as
            # bytes with the same JSON as data, and answered 409, either way round.
            (
                (
                    STRUCTURED,
                    {"datacontenttype": "application/json", "data_base64": "eyJhIjoxfQ=="},
                ),
                ({"Content-Type": "application/json"}, b'{"a":1}'),
            ),
            (
                ({"Content-Type": "application/json"}, b'{"a": 1}'),
                (
                    STRUCTURED,
                    {"datacontenttype": "application/json", "data_base64": "eyJhIjoxfQ=="},
                ),
            ),
            # A media type says the same in any case, with a charset JSON implies anyway,
            # or its parameters in another order: an HTTP client that adds "; charset=utf-8"
            # on its retry was answered 409.
            (
                (STRUCTURED, {"datacontenttype": "application/json", "data": {"a": 1}}),
                ({"Content-Type": "application/json; charset=utf-8"}, b'{"a":1}'),
            ),
            (
                ({"Content-Type": "Application/JSON; Charset=UTF-8"}, b'{"a":1}'),
                (STRUCTURED, {"data": {"a": 1}}),
            ),
            (
                ({"Content-Type": 'text/plain; charset=UTF-8; format="flowed"'}, b"hi"),
                ({"Content-Type": "text/plain; format=flowed; charset=utf-8"}, b"hi"),
            ),
            # An empty parameter (RFC 9110 5.6.6: a trailing ";", which some clients and
            # proxies add) says nothing: it read as a parameter of its own, a 409.
            (
                (STRUCTURED, {"datacontenttype": "text/plain", "data": "hi"}),
                ({"Content-Type": "text/plain;"}, b"hi"),
            ),
            (
                (STRUCTURED, {"datacontenttype": "application/json", "data": {"a": 1}}),
                ({"Content-Type": "application/json; ;charset=utf-8;"}, b'{"a":1}'),
            ),
        ],
    )
    async def test_the_same_event_in_another_mode_is_a_duplicate(
        self,
        client: httpx2.AsyncClient,
        first: tuple[dict[str, str], Any],
        again: tuple[dict[str, str], Any],
    ) -> None:
        base = {"specversion": "1.0", "id": "same-1", "source": "/s", "type": "t"}

        async def send(how: tuple[dict[str, str], Any]) -> httpx2.Response:
            headers, content = how
            if headers is STRUCTURED:
                return await client.post(
                    "/events", content=dumps({**base, **content}), headers=headers
                )
            binary = {f"ce-{k}": v for k, v in base.items()}
            return await client.post("/events", content=content, headers={**binary, **headers})

        stored = await send(first)
        assert stored.status_code == 201, stored.text
        resent = await send(again)
        assert resent.status_code == 200, resent.text
        assert resent.json()["events"][0]["position"] == stored.json()["events"][0]["position"]

    async def test_other_text_in_another_mode_still_conflicts(
        self, client: httpx2.AsyncClient
    ) -> None:
        sent = event(datacontenttype="application/xml", data='<much wow="xml"/>')
        await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        binary = {f"ce-{k}": sent[k] for k in ("specversion", "id", "source", "type")}
        response = await client.post(
            "/events",
            content=b'<much wow="XML"/>',
            headers={**binary, "Content-Type": "application/xml"},
        )
        assert response.status_code == 409
        assert problem_type(response) == "/problems/id-conflict"

    async def test_text_in_another_charset_still_conflicts(
        self, client: httpx2.AsyncClient
    ) -> None:
        """Only JSON implies its charset: text/plain bytes said to be in another charset
        are other text."""
        binary = {"ce-specversion": "1.0", "ce-id": "t-1", "ce-source": "/s", "ce-type": "t"}
        first = {**binary, "Content-Type": "text/plain; charset=utf-8"}
        assert (
            await client.post("/events", content=b"caf\xc3\xa9", headers=first)
        ).status_code == 201
        again = {**binary, "Content-Type": "text/plain; charset=latin-1"}
        response = await client.post("/events", content=b"caf\xc3\xa9", headers=again)
        assert response.status_code == 409
        assert problem_type(response) == "/problems/id-conflict"

    async def test_an_id_used_by_another_source_is_409(self, client: httpx2.AsyncClient) -> None:
        sent = event()
        await client.post("/events", content=dumps(sent), headers=STRUCTURED)
        other = {**sent, "source": "/elsewhere"}
        response = await client.post("/events", content=dumps(other), headers=STRUCTURED)
        assert response.status_code == 409
        assert "already used by source" in response.json()["detail"]


class TestExpectedVersion:
    async def test_a_mismatch_is_409_naming_stream_expected_and_actual(
        self, client: httpx2.AsyncClient
    ) -> None:
        await client.post("/events", content=dumps(event(subject="cam-7")), headers=STRUCTURED)
        response = await client.post(
            "/events", content=dumps(event(subject="cam-7", expectedversion=3)), headers=STRUCTURED
        )
        assert response.status_code == 409
        body = response.json()
        assert body["type"] == "/problems/version-conflict"
        assert (body["stream"], body["expected"], body["actual"]) == ("cam-7", 3, 1)

    async def test_zero_means_the_stream_must_not_exist(self, client: httpx2.AsyncClient) -> None:
        ok = await client.post(
            "/events", content=dumps(event(subject="new", expectedversion=0)), headers=STRUCTURED
        )
        assert ok.status_code == 201
        again = await client.post(
            "/events", content=dumps(event(subject="new", expectedversion=0)), headers=STRUCTURED
        )
        assert again.status_code == 409

    async def test_the_right_version_appends(self, client: httpx2.AsyncClient) -> None:
        await client.post("/events", content=dumps(event(stream="orders")), headers=STRUCTURED)
        response = await client.post(
            "/events", content=dumps(event(stream="orders", expectedversion=1)), headers=STRUCTURED
        )
        assert response.json()["events"][0]["stream_version"] == 2


class TestCauses:
    async def test_causes_must_exist(self, client: httpx2.AsyncClient) -> None:
        response = await client.post(
            "/events", content=dumps(event(causationid="nope-1,nope-2")), headers=STRUCTURED
        )
        assert response.status_code == 422
        assert problem_type(response) == "/problems/unknown-cause"
        assert response.json()["errors"][0]["missing"] == ["nope-1", "nope-2"]

    async def test_a_cause_earlier_in_the_batch_counts(self, client: httpx2.AsyncClient) -> None:
        stored = event()
        await client.post("/events", content=dumps(stored), headers=STRUCTURED)
        a = event(causationid=stored["id"])
        b = event(causationid=f"{stored['id']}, {a['id']}", correlationid="run-1")
        response = await client.post("/events", content=dumps([a, b]), headers=BATCH)
        assert response.status_code == 201
        read = (await client.get(f"/events/{b['id']}")).json()
        assert causes_of(read) == [stored["id"], a["id"]]
        assert read["causationid"] == f"{stored['id']},{a['id']}"
        assert read["correlationid"] == "run-1"

    async def test_a_cause_later_in_the_batch_does_not_count(
        self, client: httpx2.AsyncClient
    ) -> None:
        b = event()
        a = event(causationid=b["id"])
        response = await client.post("/events", content=dumps([a, b]), headers=BATCH)
        assert response.status_code == 422
        assert response.json()["errors"][0]["index"] == 0

    async def test_an_event_whose_cause_in_the_batch_was_refused_is_not_blamed(
        self, client: httpx2.AsyncClient
    ) -> None:
        # Its cause is there, in the batch: refused for its own mistake, which is the one
        # entry the answer names.
        a = event(causationid="nope")
        b = event(causationid=a["id"])
        c = event(causationid=f"{a['id']},also-nope")
        response = await client.post("/events", content=dumps([a, b, c]), headers=BATCH)
        assert response.status_code == 422
        assert [(e["index"], e["missing"]) for e in response.json()["errors"]] == [
            (0, ["nope"]),
            (2, ["also-nope"]),
        ]


class TestKeys:
    async def test_no_key_is_401(self, connect: Connect) -> None:
        async with connect(None) as anonymous:
            response = await anonymous.post("/events", content=dumps(event()), headers=STRUCTURED)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
        assert problem_type(response) == "/problems/unauthenticated"

    async def test_an_unknown_key_is_401(self, client: httpx2.AsyncClient) -> None:
        response = await client.get(
            "/replay", headers={"Authorization": "Bearer cw_000000000000_" + "A" * 43}
        )
        assert response.status_code == 401

    async def test_a_read_only_key_cannot_ingest(
        self, client: httpx2.AsyncClient, make_key: MakeKey
    ) -> None:
        reader = await make_key("acme", "read")
        response = await client.post(
            "/events",
            content=dumps(event()),
            headers={**STRUCTURED, "Authorization": f"Bearer {reader}"},
        )
        assert response.status_code == 403
        assert problem_type(response) == "/problems/forbidden"


class TestUnavailable:
    async def test_a_write_stuck_behind_a_lock_times_out_as_503_and_writes_nothing(
        self, database_url: Any, engine: Any, make_key: MakeKey
    ) -> None:
        app = create_app(
            Settings(_env_file=None, statement_timeout_ms=300), database_url=database_url
        )
        key = await make_key("acme", "ingest,read")
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(
            transport=transport, base_url="http://c", headers={"Authorization": f"Bearer {key}"}
        ) as client:
            sent = event()
            async with engine.connect() as blocker:
                await blocker.execute(text("SELECT * FROM log_head FOR UPDATE"))
                response = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
                await blocker.rollback()
            assert response.status_code == 503
            assert response.headers["retry-after"] == "1"
            assert problem_type(response) == "/problems/unavailable"
            assert (await client.get(f"/events/{sent['id']}")).status_code == 404
            retried = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
            assert retried.status_code == 201
        await dispose(app)


class TestBehindAPathPrefix:
    """At the root, ``Causeway`` answers POST /events itself; under a prefix the request
    goes through FastAPI to the documented route. A client sees no difference."""

    async def test_the_routed_path_answers_exactly_as_the_direct_one(
        self, app: FastAPI, make_key: MakeKey
    ) -> None:
        outer = FastAPI()
        outer.mount("/api", app)
        key = await make_key("acme", "ingest,read")
        async with (
            asgi_client(app, key) as direct,
            httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=outer),
                base_url="http://causeway/api",
                headers={"Authorization": f"Bearer {key}"},
            ) as prefixed,
        ):
            sent = event()
            stored = await direct.post("/events", content=dumps(sent), headers=STRUCTURED)
            for client in (direct, prefixed):
                again = await client.post("/events", content=dumps(sent), headers=STRUCTURED)
                assert (again.status_code, again.json()) == (200, {
                    "events": [{**stored.json()["events"][0], "duplicate": True}]
                })  # fmt: skip
                refused = await client.post(
                    "/events", content=b"{", headers={**STRUCTURED, "Authorization": "Bearer x"}
                )
                assert refused.status_code == 401
                assert refused.headers["www-authenticate"] == "Bearer"
                assert problem_type(refused) == "/problems/unauthenticated"
                bad = await client.post("/events", content=b"{", headers=STRUCTURED)
                assert (bad.status_code, problem_type(bad)) == (400, "/problems/invalid-json")
            routed = await prefixed.post("/events", content=dumps(event()), headers=STRUCTURED)
            assert routed.status_code == 201
            assert (
                routed.json()["events"][0]["position"] == stored.json()["events"][0]["position"] + 1
            )


class TestUnexpected:
    async def test_a_failure_nobody_foresaw_is_a_500_problem_that_leaks_nothing(
        self, app: FastAPI, client: httpx2.AsyncClient, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("SELECT secret FROM internals")

        monkeypatch.setattr(app.state.appender, "submit", broken)
        response = await client.post("/events", content=dumps(event()), headers=STRUCTURED)
        assert response.status_code == 500
        assert problem_type(response) == "/problems/internal"
        assert "secret" not in response.text


class TestClientGone:
    """A client that hangs up mid-body is no server failure: a 400, no error logged."""

    @pytest.mark.parametrize("prefix", ["", "/api"])
    async def test_a_body_cut_short_logs_no_error_and_stores_nothing(
        self,
        app: FastAPI,
        make_key: MakeKey,
        caplog: pytest.LogCaptureFixture,
        client: httpx2.AsyncClient,
        prefix: str,
    ) -> None:
        outer = FastAPI()
        outer.mount("/api", app)
        key = await make_key("acme", "ingest")
        connection = asgi.scope(
            "http",
            f"{prefix}/events",
            [
                (b"host", b"causeway"),
                (b"authorization", f"Bearer {key}".encode()),
                (b"content-type", b"application/cloudevents+json"),
            ],
            http_version="1.1",
            method="POST",
            scheme="http",
        )
        sent = await asgi.call(
            outer if prefix else app,
            connection,
            [{"type": "http.request", "body": dumps(event())[:10], "more_body": True}],
            then={"type": "http.disconnect"},
        )
        assert [m["status"] for m in sent if "status" in m] == [400]  # read by nobody
        assert [r for r in caplog.records if r.levelname == "ERROR"] == []
        assert (await client.get("/replay")).text == ""


async def test_post_events_refuses_a_parameter_given_twice_as_every_route_does(
    client: httpx2.AsyncClient,
) -> None:
    """``POST /events`` at the root is answered before FastAPI's routing: it took
    ``?x=1&x=2`` and stored the event, where under a path prefix (routed) it was a 400."""
    response = await client.post(
        "/events?x=1&x=2", content=dumps(event(id="twice")), headers=STRUCTURED
    )
    assert response.status_code == 400, response.text
    assert response.json()["detail"] == "x is given 2 times: it takes one value"
    assert (await client.get("/events/twice")).status_code == 404
    once = await client.post("/events?x=1", content=dumps(event(id="once")), headers=STRUCTURED)
    assert once.status_code == 201, once.text
