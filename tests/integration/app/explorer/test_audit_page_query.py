"""The explorer's audit page sends one GraphQL query (``AUDIT`` in audit.js). For a model
trained on a wide feature set (one run reading 9,000 tables, within the node cap) the
whole query was refused, ANSWER_TOO_LARGE, and the page showed only an error: it asked
each training event for its model, which costs the answer budget per event though an
OpenLineage event names none. The query is read out of audit.js as the page builds it."""

from __future__ import annotations

import re
from pathlib import Path

import httpx2

from tests.integration.ingest.openlineage.test_audit_training_walk import shared_upstream

AUDIT_JS = Path(__file__).resolve().parents[4] / "app" / "explorer" / "static" / "audit.js"


def page_query() -> str:
    """``AUDIT`` of audit.js, its ${...} constants put in as the page does."""
    text = AUDIT_JS.read_text()
    constants = dict(re.findall(r'^const (\w+) = "(.*)";$', text, re.MULTILINE))
    query = re.search(r"const AUDIT = `(.*?)`;", text, re.DOTALL)
    assert query is not None
    return re.sub(r"\$\{(\w+)\}", lambda m: constants[m.group(1)], query.group(1))


async def test_the_audit_pages_query_answers_for_a_model_trained_on_wide_data(
    client: httpx2.AsyncClient, admin: httpx2.AsyncClient
) -> None:
    decision = await shared_upstream(client, admin, tables=9000, runs=1)
    answer = await client.post(
        "/graphql", json={"query": page_query(), "variables": {"id": decision}}
    )
    body = answer.json()
    assert "errors" not in body, str(body)[:2000]
    audit = body["data"]["audit"]
    assert audit["truncated"] is False
    assert len(audit["datasets"]) == 9001  # the tables, and the feature set
    assert audit["chainVerified"] is True
