"""A real GraphQL client (``gql``) asks a real ``causeway serve`` for an audit."""

from __future__ import annotations

from pathlib import Path

import httpx2
import orjson
from gql import Client, GraphQLRequest
from gql.transport.requests import RequestsHTTPTransport
from sqlalchemy import URL

from tests.integration.app.graphql.workflow import AUDIT, hospital
from tests.integration.events import BATCH, JSON, registration
from tests.integration.process import create_key, environment, serving


def test_gql_runs_the_audit_query(database_url: URL, tmp_path: Path) -> None:
    env = environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
    )
    key = create_key(env, "hospital", "admin")
    with serving(env) as base:
        auth = {"Authorization": f"Bearer {key}"}
        for name, version in (("tumor-detector", "3"), ("fracture-detector", "1")):
            registered = httpx2.post(
                f"{base}/models/{name}/versions",
                content=registration(version),
                headers={**JSON, **auth},
            )
            assert registered.status_code == 201, registered.text
        posted = httpx2.post(
            f"{base}/events", content=orjson.dumps(hospital()), headers={**BATCH, **auth}
        )
        assert posted.status_code == 201
        transport = RequestsHTTPTransport(url=f"{base}/graphql", headers=auth, timeout=30)
        with Client(transport=transport, fetch_schema_from_transport=True) as session:
            answer = session.execute(GraphQLRequest(AUDIT, variable_values={"id": "dx-1"}))["audit"]
    assert {e["id"] for e in answer["sourceEvents"]} == {"img-1", "img-2"}
    assert [m["name"] for m in answer["models"]] == ["fracture-detector", "tumor-detector"]
    assert answer["chainVerified"] is True
