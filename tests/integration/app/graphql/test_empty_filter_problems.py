"""A GraphQL filter's empty value is refused naming the argument in ``argument``, as the
filter of too many values and GraphQL's other "cannot be empty" problems name theirs: a
client that marks the field at fault finds it named. (Over HTTP, /replay's empty values
are refused before, with a pointer to the parameter.)"""

from __future__ import annotations

import httpx2


async def test_an_empty_graphql_filter_names_its_argument(client: httpx2.AsyncClient) -> None:
    page = await client.post(
        "/graphql", json={"query": '{ events(filter: {stream: ""}) { edges { node { id } } } }'}
    )
    [error] = page.json()["errors"]
    assert "cannot be empty" in error["message"], error
    assert error["extensions"].get("argument") == "stream", error
