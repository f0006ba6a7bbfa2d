"""The auditor's recipe in docs/hash-chain.md verifies a real replay, as documented, and
every tenant's replays together catch what one tenant's cannot: an event deleted, an event
rewritten where the next one is another tenant's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.store.chain import link
from app.store.log import record_from_row
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import BATCH, digest_of, dumps, event

DOC = Path(__file__).resolve().parents[2] / "docs" / "hash-chain.md"


def documented(name: str = "check") -> Any:
    block = re.search(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert block is not None
    namespace: dict[str, Any] = {}
    exec(block.group(1), namespace)  # noqa: S102 -- our own documentation, run as written
    return namespace[name]


def documented_checker() -> Any:
    return documented("check")


async def test_the_documented_recipe_verifies_a_replay(
    client: httpx2.AsyncClient, register: Any
) -> None:
    await register("m", "1")
    first = event(
        data={
            "float": 1.5,
            "int": 2,
            "small": 1.5e-7,
            "big": 4503599627370495.5,
            "neg": -0.0,
            "one": 1.0,
            "text": "é\n",
            "breaks": "a\u2028b\u2029c\u0085d",  # line breaks to splitlines(), not to NDJSON
        }
    )
    batch = [
        first,
        event(data=None, causationid=first["id"], correlationid="run", priority=3, flag=True),
        event(data=..., data_base64="AAEC", datacontenttype="application/octet-stream"),
        event(data=..., subject="s", time="2026-11-30T12:00:00.123456789+01:00"),
        event(modelname="m", modelversion="1", modelsig=digest_of(), data=[1, "x", None]),
    ]
    response = await client.post("/events", content=dumps(batch), headers=BATCH)
    assert response.status_code == 201, response.text
    lines = (await client.get("/replay")).text.split("\n")[:-1]
    check = documented_checker()
    assert list(check(lines, "acme")) == [1, 2, 3, 4, 5, 6]  # 1: the model registration


async def test_the_recipe_catches_a_changed_value(client: httpx2.AsyncClient) -> None:
    await client.post("/events", content=dumps([event(), event()]), headers=BATCH)
    lines = (await client.get("/replay")).text.split("\n")[:-1]
    forged = lines[1].replace('"frame": 1', '"frame": 2')
    check = documented_checker()
    with pytest.raises(ValueError, match="position 2 does not match"):
        list(check([lines[0], forged], "acme"))


async def _two_tenants(app: FastAPI, make_key: MakeKey) -> dict[str, httpx2.AsyncClient]:
    return {
        tenant: asgi_client(app, await make_key(tenant, "ingest,read")) for tenant in ("a", "b")
    }


async def _exports(clients: dict[str, httpx2.AsyncClient]) -> dict[str, list[str]]:
    return {t: (await c.get("/replay")).text.split("\n")[:-1] for t, c in clients.items()}


async def _tampered(engine: AsyncEngine, *statements: Any) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("SET LOCAL session_replication_role = replica"))  # no triggers
        for statement in statements:
            await conn.execute(statement)


async def test_every_tenants_replays_checked_together_catch_a_deleted_event(
    app: FastAPI, make_key: MakeKey, engine: AsyncEngine
) -> None:
    clients = await _two_tenants(app, make_key)
    async with clients["a"] as a, clients["b"] as b:
        for client in (a, b, a, a, b):
            await client.post("/events", content=dumps([event()]), headers=BATCH)
        check_all = documented("check_all")
        assert list(check_all(await _exports(clients))) == [1, 2, 3, 4, 5]
        await _tampered(engine, text("DELETE FROM events WHERE position = 3"))
        exports = await _exports(clients)
    # Alone, a's export has a gap where b's events are anyway: only all of them show it.
    with pytest.raises(ValueError, match="position 3 is missing"):
        list(check_all(exports))


async def test_every_tenants_replays_checked_together_catch_a_rewritten_run_end(
    app: FastAPI, make_key: MakeKey, engine: AsyncEngine
) -> None:
    """a's event 2 is rewritten, its hash recomputed, and b's event 3 made to name the new
    hash: a's export alone checks out, run by run; b's event 3 no longer does."""
    clients = await _two_tenants(app, make_key)
    async with clients["a"] as a, clients["b"] as b:
        for client in (a, a, b, a):
            await client.post("/events", content=dumps([event(data={"dose": 1})]), headers=BATCH)
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT *, data IS NOT NULL AS has_json_data FROM events WHERE position = 2"
                    )
                )
            ).one()
        record = record_from_row(row)
        record.data = {"dose": 200}
        forged = link(bytes(row.prev_hash), record)
        await _tampered(
            engine,
            text(
                "UPDATE events SET data = CAST(:data AS jsonb), hash = :hash WHERE position = 2"
            ).bindparams(data=orjson.dumps(record.data).decode(), hash=forged),
            text("UPDATE events SET prev_hash = :hash WHERE position = 3").bindparams(hash=forged),
        )
        exports = await _exports(clients)
    assert '"dose": 200' in exports["a"][1]
    with pytest.raises(ValueError, match="position 3 does not match"):
        list(documented("check_all")(exports))
