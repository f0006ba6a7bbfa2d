"""What an appender's tail knows of the log, and when it sends a group back to the lock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.store.append.planning import GroupPlan, Head, StoredFacts
from app.store.append.tail_cache import TailCache
from app.store.append.writes import MovedGroup
from app.store.chain import GENESIS_HASH
from app.store.records import NewEvent


def new(event_id: str, stream: str = "s", **fields: Any) -> NewEvent:
    return NewEvent(id=event_id, source="/s", type="t", stream=stream, **fields)


def written_under_lock(
    tail: TailCache,
    found: Head,
    *events: NewEvent,
    versions: dict[tuple[str, str], int] | None = None,
) -> Head:
    """What ``append_on`` would have reported after writing ``events`` on ``found``, with
    the stream ``versions`` it looked up."""
    group = GroupPlan(
        found.position, found.hash, {}, {}, dict(versions or {}), datetime.now(UTC), {}
    )
    group.plan("acme", events)
    tail.restart(found, group)
    return Head(group.position, group.prev_hash)


def knows(tail: TailCache, *streams: str) -> None:
    """What the appender's lookup would tell of new ``streams``: version 0."""
    tail.learn(StoredFacts(versions={("acme", stream): 0 for stream in streams}))


def alone(tail: TailCache) -> Head:
    """A tail that has written twice under the lock with no one else between, and then
    as many groups as it takes to believe no one else appends."""
    first = written_under_lock(tail, Head(0, GENESIS_HASH), new("w1", "warm"))
    head = written_under_lock(tail, first, new("w2", "warm"), versions={("acme", "warm"): 1})
    knows(tail, "quiet")
    while tail.shared:
        planned = tail.plan([("acme", [new(f"q{head.position}", "quiet")])])
        assert planned is not None
        tail.written(planned)  # where it was planned: nobody else moved it
        head = Head(planned.group.position, planned.group.prev_hash)
    return head


class TestWhereTheNextGroupGoes:
    def test_a_new_tail_plans_under_the_lock(self) -> None:
        assert TailCache().head is None

    def test_after_its_first_group_it_plans_for_a_shared_log_until_that_proves_quiet(
        self,
    ) -> None:
        tail = TailCache(quiet_groups=3)
        first = written_under_lock(tail, Head(0, GENESIS_HASH), new("a"))
        assert (tail.head, tail.shared) == (first, True)  # it cannot tell who else appends
        for n in range(3):
            planned = tail.plan([("acme", [new(f"b{n}")])])
            assert planned is not None
            assert planned.shared
            assert planned.group.rows[0].canonical is not None
            tail.written(planned)
        assert not tail.shared
        planned = tail.plan([("acme", [new("c")])])
        assert planned is not None
        assert not planned.shared
        assert planned.group.rows[0].canonical is None

    def test_someone_else_between_two_groups_makes_it_plan_for_a_shared_log(self) -> None:
        tail = TailCache()
        head = alone(tail)
        elsewhere = Head(head.position + 3, b"\x01" * 32)  # three events of another writer
        after = written_under_lock(tail, elsewhere, new("c", "cold"))
        assert (tail.head, tail.shared) == (after, True)
        # Their events may be in streams it knows: it asks again.
        assert tail.wanted([("acme", [new("d", "warm")])]).streams == {("acme", "warm")}

    def test_a_shared_plan_goes_under_the_lock_when_an_event_expects_a_version(self) -> None:
        tail = TailCache()
        written_under_lock(tail, Head(0, GENESIS_HASH), new("a"))
        assert tail.plan([("acme", [new("b", expected_version=1)])]) is None
        assert tail.plan([("acme", [new("b")])]) is not None


class TestLookups:
    def test_an_event_looked_up_past_the_head_sends_the_next_group_under_the_lock(
        self,
    ) -> None:
        tail = TailCache()
        head = alone(tail)
        # Written by someone else since the tail's last group: the head is not where it was.
        tail.learn(StoredFacts(positions={("acme", "theirs"): head.position + 1}))
        assert tail.head is None
        assert tail.plan([("acme", [new("mine", "warm", causes=("theirs",))])]) is None


class TestMoved:
    def test_what_a_moved_group_claimed_moves_with_it(self) -> None:
        tail = TailCache()
        written_under_lock(tail, Head(0, GENESIS_HASH), new("a"))
        knows(tail, "other")
        planned = tail.plan([("acme", [new("b"), new("c", "other")])])
        assert planned is not None
        # Others wrote 5 events meanwhile: 2 to "s" (now at 3), and 3 to "far" (now at 7).
        head = Head(planned.group.position + 5, b"\x02" * 32)
        others = {("acme", "s"): 3, ("acme", "far"): 7}
        tail.written(planned, MovedGroup(5, {("acme", "s"): 2}, head, others))
        assert tail.head == head
        assert not tail.wanted([("acme", [new("x", "far")])])  # told by the others' events
        nxt = tail.plan([("acme", [new("d", causes=("b",)), new("e", "other"), new("f", "far")])])
        assert nxt is not None
        assert nxt.after == head
        assert [(a.position, a.stream_version) for a in nxt.outcomes[0]] == [
            (head.position + 1, 5),  # "s": a at 1, b planned at 2, moved by 2 to 4
            (head.position + 2, 2),
            (head.position + 3, 8),
        ]
        assert nxt.group.edges == [(head.position + 1, 2 + 5)]  # b moved from 2 to 7

    def test_others_too_many_to_tell_make_it_look_its_streams_up_again(self) -> None:
        tail = TailCache()
        written_under_lock(tail, Head(0, GENESIS_HASH), new("a"))
        knows(tail, "other")
        planned = tail.plan([("acme", [new("b")])])
        assert planned is not None
        head = Head(planned.group.position + 20_000, b"\x02" * 32)
        tail.written(planned, MovedGroup(20_000, {("acme", "s"): 9}, head, None))
        # Its own stream is known as written; any other it asks for again.
        assert tail.wanted([("acme", [new("c"), new("d", "other")])]).streams == {("acme", "other")}


class TestPlanning:
    def test_groups_chain_on_the_one_before_before_it_is_written(self) -> None:
        tail = TailCache()
        head = alone(tail)
        knows(tail, "other")
        first = tail.plan([("acme", [new("a", "warm"), new("b", "other")])])
        second = tail.plan([("acme", [new("c", "warm", causes=("a",))])])
        assert first is not None
        assert second is not None
        assert first.after == head
        assert second.after == Head(first.group.position, first.group.prev_hash)
        assert [a.stream_version for a in second.outcomes[0]] == [4]
        assert second.group.edges == [(head.position + 3, head.position + 1)]

    def test_a_stream_it_does_not_know_goes_under_the_lock(self) -> None:
        tail = TailCache()
        head = alone(tail)
        assert tail.plan([("acme", [new("a", "unheard-of")])]) is None
        assert tail.head == head

    def test_an_id_it_wrote_goes_under_the_lock_and_nothing_is_forgotten(self) -> None:
        tail = TailCache()
        head = alone(tail)
        assert tail.plan([("acme", [new("w2", "warm")])]) is None
        assert tail.head == head
        assert not tail.wanted([("acme", [new("x", "warm")])])

    def test_a_refused_request_makes_it_forget(self) -> None:
        tail = TailCache()
        alone(tail)
        knows(tail, "s")
        planned = tail.plan([("acme", [new("a")]), ("acme", [new("b", causes=("nowhere",))])])
        assert planned is None
        assert tail.head is None
        assert tail.wanted([("acme", [new("c", "warm")])]).streams == {("acme", "warm")}

    def test_a_plan_from_before_a_forget_no_longer_holds(self) -> None:
        tail = TailCache()
        alone(tail)
        knows(tail, "s")
        planned = tail.plan([("acme", [new("a")])])
        assert planned is not None
        assert tail.still_holds(planned)
        tail.forget()
        assert not tail.still_holds(planned)


class TestWhatItLooksUp:
    def test_only_what_it_does_not_know(self) -> None:
        tail = TailCache()
        alone(tail)
        wanted = tail.wanted(
            [
                ("acme", [new("a", "warm", causes=("w1", "far")), new("b", "cold")]),
                ("acme", [new("c", "cold", causes=("b",), model_name="m", model_version="1")]),
            ]
        )
        assert wanted.streams == {("acme", "cold")}
        assert wanted.causes == {("acme", "far")}  # w1 it wrote, b is in the group
        assert wanted.models == {("acme", "m", "1")}

    def test_facts_it_learns_leave_what_it_planned_alone(self) -> None:
        tail = TailCache()
        alone(tail)
        planned = tail.plan([("acme", [new("a", "warm")])])
        assert planned is not None
        # A lookup that ran before that group was written sees the stream at version 2.
        tail.learn(StoredFacts(versions={("acme", "warm"): 2, ("acme", "cold"): 7}))
        assert not tail.wanted([("acme", [new("b", "warm"), new("c", "cold")])])
        again = tail.plan([("acme", [new("b", "warm"), new("c", "cold")])])
        assert again is not None
        assert [a.stream_version for a in again.outcomes[0]] == [4, 8]

    def test_past_its_capacity_it_drops_its_facts_but_keeps_the_head(self) -> None:
        tail = TailCache(capacity=3)
        head = alone(tail)
        tail.learn(StoredFacts(versions={("acme", f"s{n}"): 1 for n in range(5)}))
        assert tail.is_full()
        tail.trim()
        assert not tail.is_full()
        assert tail.head == head
        assert tail.wanted([("acme", [new("x", "warm")])]).streams == {("acme", "warm")}
