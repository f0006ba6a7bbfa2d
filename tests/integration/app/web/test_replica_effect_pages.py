"""GraphQL's pages of an event's effects on two real streaming replicas read in turn, one
behind: the page after an endCursor is read where the log shows what its page announced,
as test_replica_walks_and_links.py checks for the top-level connections."""

from __future__ import annotations

from secrets import token_hex
from typing import Any

import httpx2

from tests.integration.app.web.test_replica_walks_and_links import (
    one_replica_behind,
    other,  # noqa: F401  (a fixture: the second replica, the one behind)
    wait_for_replay,
)
from tests.integration.events import STRUCTURED, dumps, event
from tests.integration.replicas import Pair, Server

FIRST_OF_STREAM = """query ($id: String!) { stream(id: $id, first: 1) { edges { node { id } } } }"""

EFFECTS_PAGE = """query ($id: ID!, $after: String) {
  event(id: $id) {
    effects(first: 1, after: $after) {
      edges { node { id } } pageInfo { hasNextPage endCursor }
    }
  }
}"""


async def _effects(admin: httpx2.AsyncClient, cause: str, after: str | None) -> dict[str, Any]:
    ask = {"query": EFFECTS_PAGE, "variables": {"id": cause, "after": after}}
    answer = await admin.post("/graphql", json=ask)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert "errors" not in body, body
    effects: dict[str, Any] = body["data"]["event"]["effects"]
    return effects


async def test_the_page_of_effects_after_an_end_cursor_shows_what_its_page_announced(
    pair: Pair,
    other: Server,  # noqa: F811
) -> None:
    """An event's effects, a page at a time: a page read on the replica ahead said
    hasNextPage, and the page after its endCursor, read on the replica behind, was empty,
    as if the effects ended there. The cursor names the position of the next effect its
    page knew of, and the page after it is read where the log shows that effect."""
    stream = f"effect-pages-{token_hex(3)}"
    async with one_replica_behind(pair, other, stream) as admin:
        found = await admin.post(
            "/graphql", json={"query": FIRST_OF_STREAM, "variables": {"id": stream}}
        )
        cause = found.json()["data"]["stream"]["edges"][0]["node"]["id"]  # on both replicas
        for _ in range(2):  # two effects, which the replica behind does not show
            made = await admin.post(
                "/events", content=dumps(event(causationid=cause)), headers=STRUCTURED
            )
            assert made.status_code == 201, made.text
        wait_for_replay(pair.primary, pair.replica)
        for _ in range(4):  # until it is read where the effects show (the replica ahead)
            page = await _effects(admin, cause, None)
            if page["pageInfo"]["hasNextPage"]:
                break
        assert page["pageInfo"]["hasNextPage"], page
        followed = [await _effects(admin, cause, page["pageInfo"]["endCursor"]) for _ in range(2)]
    # Each time, on either replica, the page it announced: the second effect.
    assert [len(f["edges"]) for f in followed] == [1, 1], followed
