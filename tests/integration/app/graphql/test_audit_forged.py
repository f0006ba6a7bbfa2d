"""GraphQL's audit says whether the chain holds for every event of its answer
(``chainVerified``). Forged shapes that ``causeway verify`` names as a break (exit 1,
tests/integration/app/store/test_verify_forged_shapes.py) make the audit answer
``chainVerified: false``: a number past a double in data or extensions failed the whole
audit as an internal error, and a recorded_at of infinity as the caller's bad request."""

from __future__ import annotations

from typing import Any

import httpx2
import psycopg
import pytest
from sqlalchemy import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from app.store.verify import verify_chain
from tests.integration.app.graphql.workflow import AUDIT, ask
from tests.integration.events import BATCH, dumps, event


def libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.mark.parametrize(
    "edit",
    [
        """UPDATE events SET data = '{"n": 1e400}' WHERE id = 'src'""",
        """UPDATE events SET extensions = '{"priority": 1e400}' WHERE id = 'src'""",
        "UPDATE events SET recorded_at = 'infinity' WHERE id = 'src'",
    ],
    ids=["data-past-a-double", "extensions-past-a-double", "recorded_at-infinity"],
)
async def test_a_forged_ancestor_is_chain_verified_false(
    client: httpx2.AsyncClient,
    database_url: URL,
    engine: AsyncEngine,
    edit: str,
) -> None:
    batch = [event(id="src", data={"n": 1}), event(id="dx", causationid="src")]
    response = await client.post("/events", content=dumps(batch), headers=BATCH)
    assert response.status_code == 201, response.text
    before: dict[str, Any] = await ask(client, AUDIT, id="dx")
    assert before["data"]["audit"]["chainVerified"] is True
    with psycopg.connect(libpq(database_url), autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # no trigger fires
        conn.execute(edit)
    async with engine.connect() as conn:  # what causeway verify runs: it names the break
        report = await verify_chain(conn)
    assert report.bad_position == 1, report
    body = await ask(client, AUDIT, id="dx")
    assert body.get("errors") is None, body.get("errors")
    assert body["data"]["audit"]["chainVerified"] is False
