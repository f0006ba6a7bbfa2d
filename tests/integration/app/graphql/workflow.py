"""What the GraphQL tests share: the hospital workflow they store, the queries they ask."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from sqlalchemy import URL

from app.main import create_app, dispose
from app.settings import Settings
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import digest_of
from tests.integration.events import event as cloudevent

AUDIT = """
query ($id: ID!) {
  audit(decisionId: $id) {
    decision { id }
    sourceEvents { id }
    derivedEvents { id }
    models { name version signatureDigest events { id } }
    graph { nodes { depth event { id } } edges { cause { id } effect { id } } truncated }
    chainVerified
    truncated
  }
}
"""
LINEAGE = """
query ($id: ID!, $dir: LineageDirection!, $depth: Int!, $limit: Int!, $types: [String!]) {
  lineage(id: $id, direction: $dir, maxDepth: $depth, limit: $limit, types: $types) {
    root { id }
    nodes { depth event { id } }
    edges { cause { id } effect { id } }
    truncated
  }
}
"""


def hospital() -> list[dict[str, Any]]:
    """Two images, one preprocessed and read by two models (a diamond), then a diagnosis
    caused by both readings and the second image (three causes)."""

    def ce(event_id: str, event_type: str, **attributes: Any) -> dict[str, Any]:
        return cloudevent(
            id=event_id,
            type=f"org.hospital.imaging.{event_type}",
            correlationid="study-42",
            **attributes,
        )

    return [
        ce("img-1", "uploaded", source="/pacs", data={"modality": "CT"}),
        ce("img-2", "uploaded", source="/pacs", data={"modality": "XR"}),
        ce("pre-1", "preprocessed", source="/prep", causationid="img-1"),
        ce(
            "tumor-1",
            "inferred",
            source="/models",
            causationid="pre-1",
            modelname="tumor-detector",
            modelversion="3",
            modelsig=digest_of(),
        ),
        ce(
            "fracture-1",
            "inferred",
            source="/models",
            causationid="pre-1",
            modelname="fracture-detector",
            modelversion="1",
            modelsig=digest_of(),
        ),
        ce("dx-1", "diagnosed", source="/decisions", causationid="tumor-1,fracture-1,img-2"),
    ]


async def ask(client: httpx2.AsyncClient, query: str, **variables: Any) -> dict[str, Any]:
    response = await client.post("/graphql", json={"query": query, "variables": variables})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def ids(items: list[dict[str, Any]]) -> set[str]:
    return {item["id"] for item in items}


@asynccontextmanager
async def limited(
    database_url: URL, make_key: MakeKey, **limits: Any
) -> AsyncIterator[httpx2.AsyncClient]:
    """A client of an app with ``limits`` (GraphQL settings)."""
    app = create_app(Settings(_env_file=None, **limits), database_url=database_url)
    try:
        async with asgi_client(app, await make_key("acme", "ingest,read")) as client:
            yield client
    finally:
        await dispose(app)
