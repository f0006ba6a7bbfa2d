"""An audit's walk held to the hashed causes: what a forged or deleted edge in the causal
graph shows, and what a cut walk may leave out without it counting."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.store.chain import ChainRecord
from app.store.graph import WalkedNode
from app.store.lineage import _walk_follows_causes
from app.store.records import StoredEvent

# d <- c <- b <- a, and d <- x: walked upstream from d. e <- b, and f <- d: other roots.
CAUSES = {"d": ("c", "x"), "c": ("b",), "b": ("a",), "a": (), "x": (), "e": ("b",), "f": ("d",)}
DEPTHS = {"d": 0, "c": 1, "x": 1, "b": 2, "a": 3}


def node(event_id: str, depth: int) -> WalkedNode:
    record = ChainRecord(
        0, "t", event_id, "/s", "t", None, None, datetime(2026, 1, 1, tzinfo=UTC), "s", 1,
        None, None, False, None, None, {}, CAUSES.get(event_id, ()), None, None, None, None,
    )  # fmt: skip
    return WalkedNode(StoredEvent(record, b"", b""), depth, None)


def follows(
    ids: dict[str, int], *, truncated: bool, roots: frozenset[str] = frozenset("d")
) -> bool:
    nodes = [node(i, d) for i, d in sorted(ids.items(), key=lambda item: item[1])]
    return _walk_follows_causes(nodes, truncated, set(roots))


def test_the_whole_walk_follows_the_causes() -> None:
    assert follows(DEPTHS, truncated=False)


def test_an_event_nobody_names_is_a_forged_edge() -> None:
    assert not follows({**DEPTHS, "intruder": 1}, truncated=False)
    assert not follows({**DEPTHS, "intruder": 1}, truncated=True)


def test_a_named_cause_left_out_is_a_deleted_edge() -> None:
    without_x = {k: v for k, v in DEPTHS.items() if k != "x"}
    assert not follows(without_x, truncated=False)


def test_a_walk_from_several_roots_follows_the_causes_of_all() -> None:
    # From e and d at once (an audit's training runs): b is reached once, from e.
    both = {"d": 0, "e": 0, "c": 1, "x": 1, "b": 1, "a": 2}
    assert follows(both, truncated=False, roots=frozenset("de"))
    # f names d, another root: d is an ancestor as well as a root.
    assert follows({**DEPTHS, "f": 0}, truncated=False, roots=frozenset("df"))
    assert not follows({**both, "intruder": 1}, truncated=False, roots=frozenset("de"))
    without_x = {k: v for k, v in both.items() if k != "x"}
    assert not follows(without_x, truncated=False, roots=frozenset("de"))


@pytest.mark.parametrize(
    "kept",
    [
        {"d": 0, "c": 1, "x": 1, "b": 2},  # cut at depth 2: b's cause a is past it
        {"d": 0, "c": 1},  # cut by the node cap inside level 1: x is left out
    ],
)
def test_a_cut_walk_may_miss_causes_at_its_last_two_levels(kept: dict[str, int]) -> None:
    assert follows(kept, truncated=True)
    assert not follows(kept, truncated=False)


def test_a_cut_walk_still_holds_the_levels_before_its_last_two() -> None:
    # a (depth 3) is kept, so levels 0 and 1 are held whole: x missing is a deleted edge.
    kept = {"d": 0, "c": 1, "b": 2, "a": 3}
    assert not follows(kept, truncated=True)
