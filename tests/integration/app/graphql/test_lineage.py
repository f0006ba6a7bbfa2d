"""GraphQL lineage walks: causes upward, effects downward, both, bounded by depth."""

from __future__ import annotations

import httpx2
import pytest

from tests.integration.app.graphql.workflow import LINEAGE, ask
from tests.integration.events import BATCH, dumps
from tests.integration.events import event as cloudevent


@pytest.mark.usefixtures("stored")
class TestLineage:
    @pytest.mark.parametrize(
        ("root", "direction", "depth", "expected", "truncated"),
        [
            ("dx-1", "UPSTREAM", 1, {"dx-1": 0, "tumor-1": 1, "fracture-1": 1, "img-2": 1}, True),
            (
                "dx-1",
                "UPSTREAM",
                2,
                {"dx-1": 0, "tumor-1": 1, "fracture-1": 1, "img-2": 1, "pre-1": 2},
                True,
            ),
            (
                "dx-1",
                "UPSTREAM",
                3,
                {"dx-1": 0, "tumor-1": 1, "fracture-1": 1, "img-2": 1, "pre-1": 2, "img-1": 3},
                False,
            ),
            (
                "img-1",
                "DOWNSTREAM",
                10,
                {"img-1": 0, "pre-1": 1, "tumor-1": 2, "fracture-1": 2, "dx-1": 3},
                False,
            ),
            ("pre-1", "BOTH", 1, {"pre-1": 0, "img-1": 1, "tumor-1": 1, "fracture-1": 1}, True),
            # Causes and effects, each followed its own way: not fracture-1 (tumor-1's
            # sibling, through pre-1 or dx-1), nor img-2 (dx-1's other cause).
            ("tumor-1", "BOTH", 10, {"tumor-1": 0, "pre-1": 1, "dx-1": 1, "img-1": 2}, False),
            ("img-2", "UPSTREAM", 5, {"img-2": 0}, False),
        ],
    )
    async def test_directions_and_depth_cut_offs(
        self,
        client: httpx2.AsyncClient,
        root: str,
        direction: str,
        depth: int,
        expected: dict[str, int],
        truncated: bool,
    ) -> None:
        answer = (await ask(client, LINEAGE, id=root, dir=direction, depth=depth, limit=100))[
            "data"
        ]["lineage"]
        assert answer["root"] == {"id": root}
        assert {n["event"]["id"]: n["depth"] for n in answer["nodes"]} == expected
        assert answer["truncated"] is truncated

    async def test_a_diamond_shows_every_path(self, client: httpx2.AsyncClient) -> None:
        answer = (await ask(client, LINEAGE, id="pre-1", dir="DOWNSTREAM", depth=5, limit=100))[
            "data"
        ]["lineage"]
        edges = {(e["cause"]["id"], e["effect"]["id"]) for e in answer["edges"]}
        assert edges == {
            ("pre-1", "tumor-1"),
            ("pre-1", "fracture-1"),
            ("tumor-1", "dx-1"),
            ("fracture-1", "dx-1"),
        }

    async def test_the_node_limit_truncates(self, client: httpx2.AsyncClient) -> None:
        answer = (await ask(client, LINEAGE, id="dx-1", dir="UPSTREAM", depth=10, limit=3))["data"][
            "lineage"
        ]
        assert len(answer["nodes"]) == 3
        assert answer["truncated"] is True

    async def test_a_limit_of_zero_still_answers_the_root(self, client: httpx2.AsyncClient) -> None:
        answer = (await ask(client, LINEAGE, id="dx-1", dir="UPSTREAM", depth=10, limit=0))["data"][
            "lineage"
        ]
        assert answer["root"] == {"id": "dx-1"}
        assert [n["event"]["id"] for n in answer["nodes"]] == ["dx-1"]
        assert answer["truncated"] is True

    # BOTH took the downward half's flag from its rows less the root: a cut that left it
    # only the root said truncated false, where DOWNSTREAM with the same cut said true.
    @pytest.mark.parametrize("direction", ["BOTH", "DOWNSTREAM"])
    @pytest.mark.parametrize(("depth", "limit"), [(0, 100), (10, 1)], ids=["depth-0", "limit-1"])
    async def test_a_cut_of_every_effect_is_truncated_both_ways(
        self, client: httpx2.AsyncClient, direction: str, depth: int, limit: int
    ) -> None:
        # img-1 has no causes, and effects: pre-1 and those after it.
        answer = (await ask(client, LINEAGE, id="img-1", dir=direction, depth=depth, limit=limit))[
            "data"
        ]["lineage"]
        assert [n["event"]["id"] for n in answer["nodes"]] == ["img-1"]
        assert answer["truncated"] is True

    async def test_types_keep_only_those_events_but_walk_through_others(
        self, client: httpx2.AsyncClient
    ) -> None:
        answer = (
            await ask(
                client,
                LINEAGE,
                id="dx-1",
                dir="UPSTREAM",
                depth=10,
                limit=100,
                types=["org.hospital.imaging.uploaded"],
            )
        )["data"]["lineage"]
        assert {n["event"]["id"] for n in answer["nodes"]} == {"dx-1", "img-1", "img-2"}
        assert {(e["cause"]["id"], e["effect"]["id"]) for e in answer["edges"]} == {
            ("img-2", "dx-1")
        }


async def test_lineage_refuses_an_empty_types_filter_as_events_does(
    client: httpx2.AsyncClient,
) -> None:
    """``types: []`` would walk as if no filter were given, ``types: [""]`` keep the root
    alone: a value went missing, which ``events(filter: {types})`` refuses too."""
    answer = await client.post(
        "/events",
        content=dumps([cloudevent(id="a"), cloudevent(id="b", causationid="a")]),
        headers=BATCH,
    )
    assert answer.status_code == 201, answer.text
    for types in ([], [""]):
        asked = await ask(
            client,
            'query ($t: [String!]) { lineage(id: "b", types: $t) { nodes { event { id } } } }',
            t=types,
        )
        assert asked.get("data") is None, (types, asked)
        assert asked["errors"][0]["extensions"]["code"] == "BAD_REQUEST"
