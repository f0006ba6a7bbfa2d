"""Groups planned ahead (before the head is locked, on what the appender knows of the
log's tail): the answers, the order and the chain are what the lock would have given,
when another writer appends between two groups too, and when a request re-sends or is
refused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from sqlalchemy import URL, text
from sqlalchemy.ext.asyncio import AsyncEngine

import app.store.append.group_commit as appender_module
from app.db.engine import create_engine, driver_of
from app.errors import IdConflict, Unavailable, UnknownCause, VersionConflict
from app.store import log
from app.store.append.group_commit import Appender
from app.store.append.planning import GroupPlan, Head
from app.store.append.writes import HeadMoved, write_group
from app.store.chain import GENESIS_HASH
from app.store.log import EventLog
from app.store.records import NewEvent
from app.store.verify import verify_chain

_write_group = write_group  # the real one, for _Late


def new(event_id: str, stream: str = "s", **fields: Any) -> NewEvent:
    return NewEvent(id=event_id, source="/s", type="t", stream=stream, **fields)


@pytest.fixture
async def appender(engine: AsyncEngine) -> AsyncIterator[Appender]:
    appender = Appender(engine, quiet_groups=2)
    # The first group is planned under the lock: it tells the tail where the head is. The
    # two after it find no one else moved the head, so the tail takes itself for the only
    # writer, and plans ahead.
    for n in range(3):
        await appender.append("acme", [new(f"warm-{n}", stream="warm")])
    yield appender
    await appender.close()


async def stored(engine: AsyncEngine) -> list[tuple[int, str, str, int]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT position, id, stream, stream_version FROM events ORDER BY position")
        )
        return [(r.position, r.id, r.stream, r.stream_version) for r in rows]


async def assert_intact(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        report = await verify_chain(conn)
    assert report.is_intact, report


async def test_groups_after_the_first_are_planned_ahead_in_order(
    appender: Appender, engine: AsyncEngine
) -> None:
    before = appender.groups_planned_ahead
    answers = await asyncio.gather(
        *(appender.append("acme", [new(f"e{n}", stream=f"s{n % 3}")]) for n in range(60))
    )
    assert appender.groups_planned_ahead > before
    positions = [a.position for [a] in answers]
    assert sorted(positions) == list(range(4, 64))
    versions: dict[str, list[int]] = {}
    for [a] in sorted(answers, key=lambda a: a[0].position):
        versions.setdefault(a.stream, []).append(a.stream_version)
    assert all(v == list(range(1, len(v) + 1)) for v in versions.values())
    assert [p for p, *_ in await stored(engine)] == list(range(1, 64))
    await assert_intact(engine)


async def test_a_re_sent_event_is_a_duplicate_with_its_stored_position(
    appender: Appender, engine: AsyncEngine
) -> None:
    [first] = await appender.append("acme", [new("once", stream="x", has_data=True, data=1)])
    [again] = await appender.append("acme", [new("once", stream="x", has_data=True, data=1)])
    [after] = await appender.append("acme", [new("next", stream="x")])
    assert (again.duplicate, again.position, again.stream_version) == (True, first.position, 1)
    assert (after.position, after.stream_version) == (first.position + 1, 2)
    await assert_intact(engine)


async def test_an_id_used_again_with_other_content_is_refused(
    appender: Appender, engine: AsyncEngine
) -> None:
    await appender.append("acme", [new("taken", has_data=True, data=1)])
    with pytest.raises(IdConflict):
        await appender.append("acme", [new("taken", has_data=True, data=2)])
    [after] = await appender.append("acme", [new("free")])
    assert after.position == 5
    await assert_intact(engine)


async def test_a_refused_request_fails_alone_and_the_next_groups_go_ahead_again(
    appender: Appender, engine: AsyncEngine
) -> None:
    outcomes = await asyncio.gather(
        appender.append("acme", [new("a1")]),
        appender.append("acme", [new("orphan", causes=("missing",))]),
        appender.append("acme", [new("late", stream="warm", expected_version=1)]),
        appender.append("acme", [new("a2", causes=("a1",))]),
        return_exceptions=True,
    )
    assert isinstance(outcomes[1], UnknownCause)
    assert isinstance(outcomes[2], VersionConflict)
    assert [o[0].position for o in (outcomes[0], outcomes[3])] == [4, 5]  # type: ignore[index]
    before = appender.groups_planned_ahead
    for n in range(3):
        await appender.append("acme", [new(f"b{n}")])
    assert appender.groups_planned_ahead > before
    async with engine.connect() as conn:
        edges = (await conn.execute(text("SELECT effect, cause FROM event_causes"))).all()
    assert [tuple(e) for e in edges] == [(5, 4)]
    await assert_intact(engine)


async def test_another_writer_between_two_groups_is_met_under_the_lock(
    appender: Appender, engine: AsyncEngine
) -> None:
    # The tail knows stream "warm" at version 3; another writer takes version 4 and
    # writes the cause the next request names.
    async with engine.begin() as conn:
        await EventLog(conn).append("acme", [new("other", stream="warm"), new("cited")])
    [mine] = await appender.append("acme", [new("mine", stream="warm", causes=("cited",))])
    assert (mine.position, mine.stream_version) == (6, 5)
    async with engine.connect() as conn:
        edges = (await conn.execute(text("SELECT effect, cause FROM event_causes"))).all()
    assert [tuple(e) for e in edges] == [(6, 5)]
    # Then, alone again, the groups after are planned ahead again.
    before = appender.groups_planned_ahead
    for n in range(3):
        await appender.append("acme", [new(f"c{n}", stream="warm")])
    assert appender.groups_planned_ahead > before
    assert [v for _, _, s, v in await stored(engine) if s == "warm"] == list(range(1, 9))
    await assert_intact(engine)


async def test_two_appenders_taking_turns_keep_one_chain(engine: AsyncEngine) -> None:
    first, second = Appender(engine), Appender(engine)
    try:
        # Turn by turn, then each several times in a row, then both at once.
        turns = [first, second] * 5 + [first] * 5 + [second] * 5
        for n, writer in enumerate(turns):
            await writer.append("acme", [new(f"t{n}", stream="shared")])
        together = await asyncio.gather(
            *(w.append("acme", [new(f"u{n}-{i}", stream="shared")]) for i, w in
              enumerate((first, second)) for n in range(15))
        )  # fmt: skip
    finally:
        await first.close()
        await second.close()
    assert len(together) == 30
    rows = await stored(engine)
    assert [p for p, *_ in rows] == list(range(1, 51))
    assert [v for *_, v in rows] == list(range(1, 51))
    await assert_intact(engine)


async def test_appenders_writing_at_once_move_their_groups_onto_each_others(
    engine: AsyncEngine,
) -> None:
    """As two ``serve`` processes would: each group goes in one round trip, onto the
    head and stream versions the other left, and no more than the first after the other
    appeared goes under the lock."""
    first, second = Appender(engine), Appender(engine)

    async def client(n: int) -> list[tuple[str, int, int]]:
        writer = (first, second)[n % 2]
        answers = []
        for m in range(12):
            [a] = await writer.append("acme", [new(f"c{n}-{m}", stream=f"s{m % 4}")])
            answers.append((a.id, a.position, a.stream_version))
        return answers

    try:
        answered = [a for found in await asyncio.gather(*map(client, range(16))) for a in found]
    finally:
        await first.close()
        await second.close()
    rows = await stored(engine)
    assert sorted(answered, key=lambda a: a[1]) == [(i, p, v) for p, i, _, v in rows]
    assert [p for p, *_ in rows] == list(range(1, 16 * 12 + 1))
    for stream in ("s0", "s1", "s2", "s3"):
        versions = [v for _, _, s, v in rows if s == stream]
        assert versions == list(range(1, len(versions) + 1))
    await assert_intact(engine)
    for writer in (first, second):
        assert writer.groups_moved > 0
        assert writer.groups_committed - writer.groups_planned_ahead <= 2  # under the lock


async def test_a_cause_another_writer_just_wrote_is_cited_where_it_is(
    engine: AsyncEngine,
) -> None:
    mine, other = Appender(engine), Appender(engine)
    try:
        await mine.append("acme", [new("a")])
        await mine.append("acme", [new("b")])  # planned for a shared log (it cannot tell)
        [theirs] = await other.append("acme", [new("theirs", stream="t")])
        [first, citing] = await mine.append("acme", [new("c"), new("d", causes=("theirs", "c"))])
    finally:
        await mine.close()
        await other.close()
    async with engine.connect() as conn:
        edges = (await conn.execute(text("SELECT effect, cause FROM event_causes"))).all()
    assert sorted(tuple(e) for e in edges) == sorted(
        [(citing.position, theirs.position), (citing.position, first.position)]
    )
    await assert_intact(engine)


async def test_once_the_other_writer_stops_it_plans_ahead_again(engine: AsyncEngine) -> None:
    mine, other = Appender(engine, quiet_groups=3), Appender(engine)
    try:
        # Under the lock, then three groups for a shared log that nobody else moved.
        for n in range(4):
            await mine.append("acme", [new(f"a{n}")])
        assert mine.groups_shared == 3
        await other.append("acme", [new("theirs")])
        # Planned ahead, the first meets theirs and goes under the lock; three shared again.
        for n in range(4):
            await mine.append("acme", [new(f"b{n}")])
        assert mine.groups_shared == 6
        answers = await asyncio.gather(*(mine.append("acme", [new(f"c{n}")]) for n in range(6)))
    finally:
        await mine.close()
        await other.close()
    assert mine.groups_shared == 6  # planned ahead, on the head it left
    assert sorted(a.stream_version for [a] in answers) == list(range(10, 16))
    await assert_intact(engine)


async def test_in_a_shared_log_an_expected_version_is_checked_under_the_lock(
    engine: AsyncEngine,
) -> None:
    mine, other = Appender(engine), Appender(engine)
    try:
        await mine.append("acme", [new("a")])
        await mine.append("acme", [new("b")])  # planned for a shared log (it cannot tell)
        await other.append("acme", [new("theirs")])  # "s" is at 3 now
        with pytest.raises(VersionConflict) as stale:
            await mine.append("acme", [new("c", expected_version=2)])
        [c] = await mine.append("acme", [new("c", expected_version=3)])
    finally:
        await mine.close()
        await other.close()
    assert (stale.value.extensions["actual"], c.stream_version) == (3, 4)
    await assert_intact(engine)


async def test_a_small_tail_forgets_and_looks_up_again(engine: AsyncEngine) -> None:
    appender = Appender(engine, tail_capacity=5)
    try:
        for round_ in range(4):
            answers = await asyncio.gather(
                *(appender.append("acme", [new(f"r{round_}-{n}", stream=f"s{n}")])
                  for n in range(12))
            )  # fmt: skip
            assert sorted(a.stream_version for [a] in answers) == [round_ + 1] * 12
        [cited] = await appender.append("acme", [new("cites", causes=("r0-0", "r3-11"))])
    finally:
        await appender.close()
    assert cited.position == 49
    await assert_intact(engine)


async def test_a_group_planned_on_a_head_that_moved_writes_nothing(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        [a] = await EventLog(conn).append("acme", [new("a")])
    # Planned on the empty log (position 0), which is no longer where the head is.
    group = GroupPlan(0, GENESIS_HASH, {}, {}, {}, datetime.now(UTC), {})
    assert isinstance(group.plan("acme", [new("b")]), list)
    async with engine.connect() as conn:
        with pytest.raises(HeadMoved) as moved:
            await write_group(await driver_of(conn), Head(0, GENESIS_HASH), group)
        await conn.rollback()
    assert (moved.value.found, moved.value.behind) == (a.position, False)
    # Planned past the head (as a group after one still on its way): behind.
    ahead = GroupPlan(5, bytes(32), {}, {}, {}, datetime.now(UTC), {})
    assert isinstance(ahead.plan("acme", [new("c")]), list)
    async with engine.connect() as conn:
        with pytest.raises(HeadMoved) as behind:
            await write_group(await driver_of(conn), Head(5, bytes(32)), ahead)
        await conn.rollback()
    assert behind.value.behind
    assert [i for _, i, _, _ in await stored(engine)] == ["a"]


async def test_groups_on_their_way_when_the_server_stops_are_answered_and_not_written(
    appender: Appender, engine: AsyncEngine, database_url: URL
) -> None:
    libpq = database_url.set(drivername="postgresql").render_as_string(hide_password=False)
    async with await psycopg.AsyncConnection.connect(libpq) as holder:
        await holder.execute("SELECT 1 FROM log_head FOR UPDATE")  # both groups wait
        on_their_way = [
            asyncio.ensure_future(appender.append("acme", [new(f"f{n}")])) for n in (1, 2)
        ]
        await asyncio.sleep(0.2)
        queued = asyncio.ensure_future(appender.append("acme", [new("q")]))
        await asyncio.sleep(0.1)
        assert appender._writer is not None
        appender._writer.cancel()
        await asyncio.wait([*on_their_way, queued], timeout=5)
        await holder.rollback()
    for answer in (*on_their_way, queued):
        assert isinstance(answer.exception(), Unavailable)
    await asyncio.sleep(0.2)  # had a statement outlived the stop, it would commit now
    assert [i for _, i, _, _ in await stored(engine)] == ["warm-0", "warm-1", "warm-2"]
    await assert_intact(engine)


async def test_a_group_stopped_on_its_way_claims_nothing_afterwards(
    engine: AsyncEngine, database_url: URL
) -> None:
    """The writer is stopped while a group waits at the head: that group is never
    written, and what it claimed (its head, its event, its stream's version) is not
    believed when the appender is used again, though others moved the head meanwhile."""
    mine, other = Appender(engine), Appender(engine)
    try:
        await mine.append("acme", [new("a")])
        libpq = database_url.set(drivername="postgresql").render_as_string(hide_password=False)
        async with await psycopg.AsyncConnection.connect(libpq) as holder:
            await holder.execute("SELECT 1 FROM log_head FOR UPDATE")
            stopped = asyncio.ensure_future(mine.append("acme", [new("x1")]))
            await asyncio.sleep(0.2)
            mine._writer.cancel()  # type: ignore[union-attr]  # as a stopping server does
            await asyncio.wait([stopped], timeout=5)
            await holder.rollback()
        assert isinstance(stopped.exception(), Unavailable)
        await other.append("acme", [new("o1", "o"), new("o2", "o")])
        with pytest.raises(UnknownCause):
            await mine.append("acme", [new("y", causes=("x1",))])
        [y] = await mine.append("acme", [new("y")])
    finally:
        await mine.close()
        await other.close()
    assert (y.position, y.stream_version) == (4, 2)
    await assert_intact(engine)


async def test_a_database_defaulting_to_repeatable_read_still_takes_groups_in_turn(
    database_url: URL,
) -> None:
    # A group that waited at the head for the one before would fail under REPEATABLE
    # READ (the row it locks changed after its snapshot): the appender's sessions
    # default to READ COMMITTED.
    engine = create_engine(database_url, pool_size=2, role=None)  # the owner's, to ALTER
    async with engine.connect() as conn:
        database = database_url.database
        await conn.execute(
            text(
                f"ALTER DATABASE \"{database}\" SET default_transaction_isolation = 'repeatable read'"
            )
        )
        await conn.commit()
    await engine.dispose()  # new sessions take the new default
    engine = create_engine(database_url, pool_size=2)
    appender = Appender(engine)
    libpq = database_url.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        for n in range(3):
            await appender.append("acme", [new(f"warm-{n}")])
        async with await psycopg.AsyncConnection.connect(libpq) as holder:
            await holder.execute("SELECT 1 FROM log_head FOR UPDATE")
            waiting = [
                asyncio.ensure_future(appender.append("acme", [new(f"e{n}")])) for n in (1, 2)
            ]
            await asyncio.sleep(0.2)
            await holder.rollback()
        answers = await asyncio.gather(*waiting)
    finally:
        await appender.close()
    assert [a.position for [a] in answers] == [4, 5]
    async with engine.connect() as conn:  # the pool's sessions keep the database's default
        assert (await conn.execute(text("SHOW default_transaction_isolation"))).scalar() == (
            "repeatable read"
        )
    await assert_intact(engine)
    await engine.dispose()


class _Late:
    """``write_group`` as it is, with the first group planned ahead held back before it
    reaches the database: the order in which two connections' statements arrive is
    PostgreSQL's to choose, and this makes the other order happen (a delay, not a
    different behaviour)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, delay_s: float) -> None:
        self.sent: list[tuple[bool, list[tuple[str, str, int]]]] = []
        self._delay_s = delay_s
        monkeypatch.setattr(appender_module, "write_group", self)
        monkeypatch.setattr(log, "write_group", self)

    async def __call__(
        self,
        driver: Any,
        after: Head,
        group: GroupPlan,
        *,
        commit: bool = False,
        notify: bool = True,
    ) -> None:
        rows = [(r.event.id, r.event.stream, r.stream_version) for r in group.rows]
        self.sent.append((commit, rows))
        if not commit and len(self.sent) == 1:
            await asyncio.sleep(self._delay_s)
        await _write_group(driver, after, group, commit=commit, notify=notify)


@pytest.mark.parametrize("first_fails", [False, True])
async def test_a_group_that_reaches_the_head_first_waits_for_the_one_before(
    appender: Appender, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch, first_fails: bool
) -> None:
    late = _Late(monkeypatch, delay_s=0.2)
    bad: dict[str, Any] = {"has_data": True, "data": "nul\x00"} if first_fails else {}
    first = asyncio.ensure_future(appender.append("acme", [new("r1", stream="x", **bad)]))
    await asyncio.sleep(0.02)
    second = asyncio.ensure_future(appender.append("acme", [new("r2", stream="x")]))
    answers = await asyncio.gather(first, second, return_exceptions=True)
    rows = {i: (p, v) for p, i, _, v in await stored(engine)}
    if first_fails:  # the second's plan rested on it: written again under the lock
        assert isinstance(answers[0], psycopg.DataError)
        assert "r1" not in rows
    else:
        assert rows["r1"] == (answers[0][0].position, 1)  # type: ignore[index]
    [r2] = answers[1]  # type: ignore[misc]
    assert rows["r2"] == (r2.position, r2.stream_version) == ((5, 2) if not first_fails else (4, 1))
    if not first_fails:  # the second went again as it was planned, once the first was in
        assert [rows for _, rows in late.sent] == [
            [("r1", "x", 1)],
            [("r2", "x", 2)],
            [("r2", "x", 2)],
        ]
    await assert_intact(engine)


async def test_facts_dropped_while_a_group_was_looked_up_are_looked_up_again(
    appender: Appender, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stream "old" is at version 3, written by another writer before the appender
    # started. While the appender looks it up for the next group, the group before that
    # fails (a NUL only PostgreSQL refuses), and the tail drops what it knew.
    async with engine.begin() as conn:
        await EventLog(conn).append("acme", [new(f"old-{n}", stream="old") for n in range(3)])
    late = _Late(monkeypatch, delay_s=0.1)
    good = asyncio.ensure_future(appender.append("acme", [new("good")]))
    bad = asyncio.ensure_future(appender.append("acme", [new("bad", has_data=True, data="\x00")]))
    await asyncio.sleep(0.02)
    following = asyncio.ensure_future(appender.append("acme", [new("next", stream="old")]))
    answers = await asyncio.gather(good, bad, following, return_exceptions=True)
    assert isinstance(answers[1], psycopg.DataError)
    [written] = answers[2]  # type: ignore[misc]
    assert written.stream_version == 4
    assert not [rows for _, rows in late.sent if ("next", "old", 1) in rows]
    await assert_intact(engine)


async def test_a_stop_during_a_lookup_gives_the_connection_back(
    appender: Appender, engine: AsyncEngine, database_url: URL
) -> None:
    libpq = database_url.set(drivername="postgresql").render_as_string(hide_password=False)
    async with await psycopg.AsyncConnection.connect(libpq) as holder:
        await holder.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")  # lookups wait
        waiting = asyncio.ensure_future(appender.append("acme", [new("e1", stream="unseen")]))
        await asyncio.sleep(0.3)
        assert appender._writer is not None
        appender._writer.cancel()
        await asyncio.wait([waiting], timeout=5)
        await holder.rollback()
    assert isinstance(waiting.exception(), Unavailable)
    await appender.close()
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]


_CONTENT: dict[str, dict[str, Any]] = {
    "json-null": {"has_data": True, "data": None},
    "no-data": {},
    "awkward-text": {"has_data": True, "data": 'a"b\\c\nd\te\u2028\U0001f600 \\u0041 \\x00'},
    "nested-nulls": {"has_data": True, "data": {"a": None, "b": [None, 1, "x"]}},
    "false": {"has_data": True, "data": False},
    "empty-object": {"has_data": True, "data": {}},
    "big-integer": {"has_data": True, "data": 2**53 - 1},
    "bytes": {"has_data": True, "data_binary": bytes(range(256))},
    "no-bytes": {"has_data": True, "data_binary": b""},
    "text": {"has_data": True, "data": "plain", "datacontenttype": "text/plain"},
    "extensions": {"extensions": {"k": 'v\\"', "n": 5, "b": True}},
    "far-offset": {"subject": 's"\\{},NULL', "time": "2026-01-01T00:00:00+23:59"},
    "odd-causes": {"causes": ('ca"use', "c\\d", "NULL", "{x,y}")},
}


@pytest.mark.parametrize("plan_ahead", [True, False])
async def test_every_form_of_content_is_stored_as_hashed(
    engine: AsyncEngine, plan_ahead: bool
) -> None:
    appender = Appender(engine, plan_ahead=plan_ahead)
    try:
        for n in range(3):
            await appender.append("acme", [new(f"warm-{n}")])
        for cause in _CONTENT["odd-causes"]["causes"]:
            await appender.append("acme", [new(cause, stream="causes")])
        for name, fields in _CONTENT.items():
            await appender.append("acme", [new(name, stream=name, **fields)])
        assert (appender.groups_planned_ahead > 0) is plan_ahead
    finally:
        await appender.close()
    async with engine.connect() as conn:
        forms = {
            r.id: (r.typed, r.data_binary)
            for r in await conn.execute(
                text("SELECT id, jsonb_typeof(data) AS typed, data_binary FROM events")
            )
        }
        edges = (await conn.execute(text("SELECT count(*) FROM event_causes"))).scalar()
    assert forms["json-null"] == ("null", None)
    assert forms["no-data"] == (None, None)
    assert forms["bytes"] == (None, bytes(range(256)))
    assert forms["no-bytes"] == (None, b"")
    assert edges == 4
    await assert_intact(engine)  # every stored value is what was hashed
