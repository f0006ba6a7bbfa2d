"""The auditor's recipe in docs/hash-chain.md verifies a real replay, as documented."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.integration.events import BATCH, digest_of, dumps, event

DOC = Path(__file__).resolve().parents[2] / "docs" / "hash-chain.md"


def documented_checker() -> Any:
    block = re.search(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert block is not None
    namespace: dict[str, Any] = {}
    exec(block.group(1), namespace)  # noqa: S102 -- our own documentation, run as written
    return namespace["check"]


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
