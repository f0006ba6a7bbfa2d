"""POST /events at the root (answered before FastAPI) and under a path prefix (the routed
path) answer alike: a re-send of JSON held as bytes, an attribute nested past what
Python can print, the same JSON with a float sent in two modes, and a body declared past
the cap sent without a key each gave a 500, a 409 or another status than the other path."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import httpx2
import pytest
from fastapi import FastAPI

from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import BATCH, STRUCTURED, dumps

BASE = {"specversion": "1.0", "source": "/s", "type": "t"}


def _prefixed(app: FastAPI, key: str) -> httpx2.AsyncClient:
    outer = FastAPI()
    outer.mount("/api", app)
    return httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=outer),
        base_url="http://causeway/api",
        headers={"Authorization": f"Bearer {key}"},
    )


@pytest.fixture(params=["root", "prefixed"])
async def either(
    request: pytest.FixtureRequest, app: FastAPI, make_key: MakeKey
) -> AsyncIterator[httpx2.AsyncClient]:
    """The fast path at the root, and the routed path under a prefix."""
    key = await make_key("acme", "ingest,read")
    client = asgi_client(app, key) if request.param == "root" else _prefixed(app, key)
    async with client:
        yield client


# JSON held in data_base64 is read (orjson: 1024 levels) and written again (254 levels) to
# compare a re-send with what is stored: the write's TypeError was a 500.
DEEP_JSON_B64 = base64.b64encode(b"[" * 300 + b"]" * 300).decode()


async def test_a_resend_of_deep_json_bytes_is_answered_not_a_500(
    either: httpx2.AsyncClient,
) -> None:
    sent = {
        **BASE,
        "id": "deep-1",
        "datacontenttype": "application/json",
        "data_base64": DEEP_JSON_B64,
    }
    assert (
        await either.post("/events", content=dumps(sent), headers=STRUCTURED)
    ).status_code == 201
    # Other content under the same id: a 409 id-conflict.
    other = await either.post("/events", content=dumps({**sent, "type": "u"}), headers=STRUCTURED)
    assert other.status_code == 409, other.text
    # The same event, its JSON's charset said (README: implied): a duplicate.
    same = {**sent, "datacontenttype": "application/json; charset=utf-8"}
    again = await either.post("/events", content=dumps(same), headers=STRUCTURED)
    assert again.status_code == 200, again.text


async def test_a_batch_repeating_an_id_with_deep_json_bytes_is_409(
    either: httpx2.AsyncClient,
) -> None:
    first = {
        **BASE,
        "id": "deep-2",
        "datacontenttype": "application/json",
        "data_base64": DEEP_JSON_B64,
    }
    response = await either.post(
        "/events", content=dumps([first, {**first, "type": "u"}]), headers=BATCH
    )
    assert response.status_code == 409, response.text


# A JSON value nested ~1000 levels (orjson reads up to 1024) made repr() and str() in the
# messages of specversion and causationid raise RecursionError: a 500 where any other
# attribute is a 400.
@pytest.mark.parametrize("attribute", ["specversion", "causationid"])
@pytest.mark.parametrize("mode", ["structured", "batch"])
async def test_a_deeply_nested_attribute_is_a_400_not_a_500(
    either: httpx2.AsyncClient, attribute: str, mode: str
) -> None:
    nested = b"[" * 1000 + b"]" * 1000
    members = {"specversion": b'"1.0"', "id": b'"n-1"', "source": b'"/s"', "type": b'"t"'}
    members[attribute] = nested
    event = b"{" + b",".join(b'"%s":%s' % (k.encode(), v) for k, v in members.items()) + b"}"
    body, headers = (event, STRUCTURED) if mode == "structured" else (b"[" + event + b"]", BATCH)
    response = await either.post("/events", content=body, headers=headers)
    assert response.status_code == 400, response.text
    assert response.json()["type"] == "/problems/invalid-cloudevent"


# JSON sent as bytes (data_base64) was compared as orjson reads it, while JSON sent as data
# or as a binary-mode body is stored normalised (1.0 -> 1). README: "data of a JSON type
# sent as bytes (data_base64, a binary-mode body) is the JSON it holds, as data would
# have sent it".
@pytest.mark.parametrize("order", ["binary-first", "base64-first"])
async def test_the_same_json_with_a_float_is_a_duplicate_in_any_mode(
    either: httpx2.AsyncClient, order: str
) -> None:
    text = b'{"score": 1.0}'
    binary = {
        "ce-specversion": "1.0",
        "ce-id": f"f-{order}",
        "ce-source": "/s",
        "ce-type": "t",
        "Content-Type": "application/json",
    }
    structured = {
        **BASE,
        "id": f"f-{order}",
        "datacontenttype": "application/json",
        "data_base64": base64.b64encode(text).decode(),
    }

    async def as_binary() -> httpx2.Response:
        return await either.post("/events", content=text, headers=binary)

    async def as_base64() -> httpx2.Response:
        return await either.post("/events", content=dumps(structured), headers=STRUCTURED)

    first, again = (as_binary, as_base64) if order == "binary-first" else (as_base64, as_binary)
    stored = await first()
    assert stored.status_code == 201, stored.text
    resent = await again()
    assert resent.status_code == 200, resent.text
    assert resent.json()["events"][0]["position"] == stored.json()["events"][0]["position"]


# Every route refuses a declared Content-Length over the cap (413) before it looks at the
# key; POST /events at the root authorized first (401). README: CAUSEWAY_MAX_REQUEST_BYTES
# caps "the body of any POST ... key or no key (over: 413 ...)".
async def test_an_oversized_body_without_a_valid_key_is_413_at_the_root_as_under_a_prefix(
    app: FastAPI, make_key: MakeKey
) -> None:
    key = await make_key("acme", "ingest")
    body = b"x" * ((16 << 20) + 1)
    bad = {**STRUCTURED, "Authorization": "Bearer not-a-key"}
    async with asgi_client(app, key) as root, _prefixed(app, key) as prefixed:
        under_prefix = await prefixed.post("/events", content=body, headers=bad)
        at_root = await root.post("/events", content=body, headers=bad)
    assert under_prefix.status_code == 413
    assert at_root.status_code == under_prefix.status_code, at_root.text
