"""The producer client against a real ``causeway serve``: one event, a batch, a re-send
and a refusal, as a producer's code sees them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from secrets import token_hex

import pytest
from sqlalchemy import URL

from ingest.client import AppendResult, CausewayClient, CausewayError
from tests.conftest import janitor
from tests.integration.process import create_key, environment, serving


@pytest.fixture(scope="module")
def client(
    server: URL, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CausewayClient]:
    # One server for the module: starting one is most of what these tests cost.
    name = f"causeway_client_{token_hex(4)}"
    with janitor(server, name, template_dbname=template_db):
        url = server.set(database=name).render_as_string(hide_password=False)
        data = Path(tmp_path_factory.mktemp("data"))
        env = environment(CAUSEWAY_DATABASE_URL=url, CAUSEWAY_DATA_DIR=str(data))
        key = create_key(env, "acme", "ingest,read")
        with serving(env) as base, CausewayClient(base, key) as http:
            yield http


def event(event_id: str, **extra: object) -> dict[str, object]:
    return {
        "specversion": "1.0",
        "id": event_id,
        "source": "urn:test:client",
        "type": "com.example.reading",
        "subject": "cam-1",
        "data": {"n": 1},
        **extra,
    }


class TestPostEvent:
    def test_an_event_is_appended_with_its_position(self, client: CausewayClient) -> None:
        result = client.post_event(event("client-1"))
        assert isinstance(result, AppendResult)
        assert (result.id, result.source, result.duplicate) == (
            "client-1",
            "urn:test:client",
            False,
        )
        assert result.position > 0

    def test_a_resend_answers_the_stored_position(self, client: CausewayClient) -> None:
        first = client.post_event(event("client-2"))
        again = client.post_event(event("client-2"))
        assert again.duplicate
        assert (again.position, again.stream_version) == (first.position, first.stream_version)

    def test_a_refused_event_raises_with_the_problem(self, client: CausewayClient) -> None:
        with pytest.raises(CausewayError) as refused:
            client.post_event(event("client-3", causationid="no-such-event"))
        assert refused.value.status == 422
        assert refused.value.problem["type"] == "/problems/unknown-cause"


class TestPostBatch:
    def test_a_batch_lands_in_order(self, client: CausewayClient) -> None:
        results = client.post_batch([event("client-4"), event("client-5", causationid="client-4")])
        assert [r.id for r in results] == ["client-4", "client-5"]
        assert results[1].position == results[0].position + 1
