"""The answer budget counts bytes of JSON values too: list items count one however large
their data, and one event's data repeated by every effect that lists it among its causes,
and again by every alias, made an answer hundreds of times what is stored."""

from __future__ import annotations

import base64

import httpx2
from sqlalchemy import URL

from tests.integration.app.graphql.workflow import ask, limited
from tests.integration.conftest import MakeKey
from tests.integration.events import BATCH, dumps
from tests.integration.events import event as cloudevent


async def store_a_large_cause(client: httpx2.AsyncClient) -> None:
    """One event of 64 KiB of data, and 100 small events it caused."""
    big = cloudevent(id="big", data={"blob": "x" * 65536})
    effects = [cloudevent(causationid="big", data={"i": i}) for i in range(100)]
    posted = await client.post("/events", content=dumps([big, *effects]), headers=BATCH)
    assert posted.status_code == 201, posted.text


def repeated(aliases: int) -> str:
    """``big``'s data through each of its effects' causes, ``aliases`` times over."""
    field = 'event(id: "big") { effects(first: 100) { edges { node { causes { data } } } } }'
    return "{ " + " ".join(f"a{n}: {field}" for n in range(aliases)) + " }"


# 843 bytes of query made 65 MB of answer, 11,000 of the 100,000 items the budget allows;
# with the default caps the same shape came to about 9 GB.
async def test_an_answer_past_its_bytes_is_refused_whole(
    database_url: URL, make_key: MakeKey
) -> None:
    async with limited(database_url, make_key, graphql_max_answer_bytes=8 << 20) as client:
        await store_a_large_cause(client)
        within = await ask(client, repeated(1))  # 100 times 64 KiB: 6.5 MB
        refused = await ask(client, repeated(10))  # 65 MB
    assert "errors" not in within, within
    assert len(within["data"]["a0"]["effects"]["edges"]) == 100
    assert refused["data"] is None
    [error] = refused["errors"]
    assert error["extensions"]["code"] == "ANSWER_TOO_LARGE"
    assert error["extensions"]["max_answer_bytes"] == 8 << 20
    assert "more than 8388608 bytes of JSON values" in error["message"]


async def test_binary_data_counts_as_its_base64(database_url: URL, make_key: MakeKey) -> None:
    async with limited(database_url, make_key, graphql_max_answer_bytes=1 << 20) as client:
        blob = base64.b64encode(b"\0" * 300_000).decode()  # 400 KB as base64
        big = cloudevent(id="big", data=..., data_base64=blob, datacontenttype="application/x")
        effects = [cloudevent(causationid="big") for _ in range(3)]
        posted = await client.post("/events", content=dumps([big, *effects]), headers=BATCH)
        assert posted.status_code == 201, posted.text
        field = (
            'event(id: "big") { effects(first: 3) { edges { node { causes { dataBase64 } } } } }'
        )
        answer = await ask(client, "{ " + field + " }")  # 1.2 MB of base64
    assert answer["errors"][0]["extensions"]["code"] == "ANSWER_TOO_LARGE"
