"""Fixtures of the GraphQL tests: the hospital workflow stored, an app with other limits."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from tests.integration.app.graphql.workflow import hospital
from tests.integration.events import BATCH, dumps


@pytest.fixture
async def stored(client: httpx2.AsyncClient, register: Any) -> None:
    await register("tumor-detector", "3")
    await register("fracture-detector", "1")
    response = await client.post("/events", content=dumps(hospital()), headers=BATCH)
    assert response.status_code == 201
