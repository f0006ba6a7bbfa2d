"""A burst of requests with one key costs one lookup of that key, not one each: whenever a
busy key's cache entry ran out, every request in flight took a pooled connection for the
same row at once, and a burst of 32 clients opened connections past the pool's size."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI
from sqlalchemy import event

from tests.integration.conftest import MakeKey, asgi_client


def _key_lookups(app: FastAPI) -> list[str]:
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "api_keys" in statement:
            seen.append(statement)

    event.listen(app.state.engine.sync_engine, "before_cursor_execute", note)
    return seen


async def test_a_burst_with_one_uncached_key_looks_it_up_once(
    app: FastAPI, make_key: MakeKey
) -> None:
    key = await make_key("acme", "read")
    lookups = _key_lookups(app)
    async with asgi_client(app, key) as client:
        answers = await asyncio.gather(*(client.get(f"/events/e{n}") for n in range(32)))
    assert [a.status_code for a in answers] == [404] * 32  # each one authenticated
    assert len(lookups) == 1


async def test_a_burst_with_an_unknown_key_is_refused_after_one_lookup(
    app: FastAPI, make_key: MakeKey
) -> None:
    unknown = "cw_000000000000_" + "a" * 43  # well formed, never issued
    lookups = _key_lookups(app)
    async with asgi_client(app, unknown) as client:
        answers = await asyncio.gather(*(client.get("/events/e") for _ in range(16)))
    assert [a.status_code for a in answers] == [401] * 16
    assert len(lookups) == 1
    async with asgi_client(app, unknown) as client:  # not remembered: asked again
        assert (await client.get("/events/e")).status_code == 401
    assert len(lookups) == 2
