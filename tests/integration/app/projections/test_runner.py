"""The projection engine against a real PostgreSQL: exactly-once effects across crashes,
rebuilds equal to incremental state, one leader among several runners, recorded errors."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import URL, BigInteger, Column, MetaData, Table, delete, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db.engine import create_engine
from app.db.tables import events
from app.errors import Conflict, NotFound
from app.projections import checkpoints as checkpoints_module
from app.projections.base import FlushFailed
from app.projections.batches import ProjectionFailed
from app.projections.deployments import Deployments
from app.projections.model_registry import ModelRegistry
from app.projections.runner import ProjectionRunner
from app.projections.status import fetch_skips, fetch_status
from app.store import deployments as deploy
from app.store.deployments import DeploymentState
from app.store.log import EventLog
from app.store.model_registry import Signature, alias_event, registration_event
from app.store.records import NewEvent, StoredEvent
from app.wiring import every_projection

test_metadata = MetaData()
applied = Table("test_applied", test_metadata, Column("position", BigInteger, primary_key=True))


class Counter:
    """Writes one row per event it applies: a second application fails on the key."""

    name = "test-counter"
    tables = (applied,)
    types = frozenset({"t.count"})

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at

    async def apply(self, conn: AsyncConnection, event: StoredEvent) -> None:
        await conn.execute(insert(applied).values(position=event.position))
        if event.position == self.fail_at:
            raise RuntimeError(f"cannot apply {event.position}")


@pytest.fixture
async def counter_table(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(test_metadata.create_all)


async def append_counts(engine: AsyncEngine, count: int, tenant: str = "acme") -> None:
    batch = [
        NewEvent(id=f"c{i}-{tenant}", source="/s", type="t.count", stream="s") for i in range(count)
    ]
    others = [
        NewEvent(id=f"o{i}-{tenant}", source="/s", type="t.other", stream="o") for i in range(count)
    ]
    async with engine.begin() as conn:
        await EventLog(conn).append(
            tenant, [e for pair in zip(batch, others, strict=True) for e in pair]
        )


async def applied_positions(engine: AsyncEngine) -> list[int]:
    async with engine.connect() as conn:
        return [
            r[0]
            for r in await conn.execute(select(applied.c.position).order_by(applied.c.position))
        ]


@pytest.mark.usefixtures("counter_table")
class TestExactlyOnce:
    async def test_a_crash_mid_batch_leaves_no_trace_and_the_retry_applies_each_once(
        self, engine: AsyncEngine
    ) -> None:
        await append_counts(engine, 10)  # counts at odd positions 1, 3, ..., 19
        runner = ProjectionRunner(engine, [Counter(fail_at=11)], batch_size=4)
        assert await runner.step(runner.projection("test-counter")) == 7  # 1, 3, 5, 7
        with pytest.raises(ProjectionFailed) as failed:
            await runner.step(runner.projection("test-counter"))  # 9, then 11 fails
        assert failed.value.position == 11
        assert await applied_positions(engine) == [1, 3, 5, 7]  # the partial batch rolled back
        fixed = ProjectionRunner(engine, [Counter()], batch_size=4)
        await fixed.catch_up(fixed.projection("test-counter"))
        assert await applied_positions(engine) == list(range(1, 20, 2))

    async def test_a_runner_cancelled_mid_batch_resumes_without_double_effects(
        self, engine: AsyncEngine
    ) -> None:
        await append_counts(engine, 50)

        class Slow(Counter):
            async def apply(self, conn: AsyncConnection, event: StoredEvent) -> None:
                await super().apply(conn, event)
                await asyncio.sleep(0.005)

        runner = ProjectionRunner(engine, [Slow()], batch_size=20)
        task = asyncio.create_task(runner.catch_up(runner.projection("test-counter")))
        await asyncio.sleep(0.15)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        resumed = ProjectionRunner(engine, [Counter()], batch_size=20)
        await resumed.catch_up(resumed.projection("test-counter"))
        assert await applied_positions(engine) == list(range(1, 100, 2))

    async def test_rebuild_gives_the_incremental_state(self, engine: AsyncEngine) -> None:
        await append_counts(engine, 30)
        runner = ProjectionRunner(engine, [Counter()], batch_size=7)
        await runner.catch_up(runner.projection("test-counter"))
        before = await applied_positions(engine)
        assert await runner.rebuild(runner.projection("test-counter")) == 30
        assert await applied_positions(engine) == before


@pytest.mark.usefixtures("counter_table")
class TestRunning:
    async def test_two_runners_one_leader_no_double_application(
        self, engine: AsyncEngine, database_url: URL
    ) -> None:
        other_engine = create_engine(database_url, pool_size=3)
        first = ProjectionRunner(engine, [Counter()], poll_interval_s=0.05)
        second = ProjectionRunner(other_engine, [Counter()], poll_interval_s=0.05)
        tasks = [asyncio.create_task(first.run()), asyncio.create_task(second.run())]
        for _ in range(5):
            await append_counts(engine, 10, tenant=f"t{_}")
            await asyncio.sleep(0.05)
        await _until(lambda: _caught_up(engine, "test-counter"))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await other_engine.dispose()
        assert len(await applied_positions(engine)) == 50
        async with engine.connect() as conn:
            [status] = await fetch_status(conn, [Counter()])
        assert status.failures == 0
        assert status.lag_events == 0

    async def test_a_failing_event_stops_the_projection_and_shows_in_status(
        self, engine: AsyncEngine
    ) -> None:
        await append_counts(engine, 3)
        runner = ProjectionRunner(engine, [Counter(fail_at=3)], poll_interval_s=0.05)
        task = asyncio.create_task(runner.run())

        async def failed_twice() -> bool:
            async with engine.connect() as conn:
                [status] = await fetch_status(conn, [Counter()])
            return status.failures >= 2

        await _until(failed_twice)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        async with engine.connect() as conn:
            [status] = await fetch_status(conn, [Counter()])
        assert status.checkpoint == 2  # position 1 applied; stopped before 3, nothing skipped
        assert status.error_position == 3
        assert status.last_error == "RuntimeError: cannot apply 3"
        assert await applied_positions(engine) == [1]

    async def test_a_skipped_event_is_passed_over_now_and_in_every_rebuild(
        self, engine: AsyncEngine
    ) -> None:
        await append_counts(engine, 3)  # t.count at positions 1, 3 and 5
        runner = ProjectionRunner(engine, [Counter(fail_at=3)], poll_interval_s=0.05)
        projection = runner.projection("test-counter")
        task = asyncio.create_task(runner.run())
        await _until(lambda: _stopped_at(engine, projection, 3))
        with pytest.raises(Conflict, match="is stopped at 3"):
            await runner.skip(projection, 5, "not the one")
        assert await runner.skip(projection, 3, "bad input, fixed upstream") == (
            "RuntimeError: cannot apply 3"
        )
        await _until(lambda: _caught_up(engine, "test-counter"))  # the leader passes it
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert await applied_positions(engine) == [1, 5]
        await runner.rebuild(projection)
        assert await applied_positions(engine) == [1, 5]
        async with engine.connect() as conn:
            [status] = await fetch_status(conn, [projection])
            [skip] = await fetch_skips(conn)
        assert (status.skipped, status.lag_events, status.last_error) == ([3], 0, None)
        assert (skip.position, skip.reason, skip.error) == (
            3,
            "bad input, fixed upstream",
            "RuntimeError: cannot apply 3",
        )
        with pytest.raises(Conflict, match="is not stopped"):
            await runner.skip(projection, 3, "again")
        fixed = ProjectionRunner(engine, [Counter()])
        await fixed.unskip(fixed.projection("test-counter"), 3)
        await fixed.rebuild(fixed.projection("test-counter"))
        assert await applied_positions(engine) == [1, 3, 5]
        with pytest.raises(NotFound):
            await fixed.unskip(fixed.projection("test-counter"), 3)

    async def test_skipping_the_last_pending_event_clears_the_failure_at_the_next_retry(
        self, engine: AsyncEngine
    ) -> None:
        # Nothing of the projection's follows the skipped event: the retry reads nothing,
        # and must still move on, or the projection would look failed and ever more behind.
        await append_counts(engine, 3)  # t.count at positions 1, 3 and 5; the head is 6
        runner = ProjectionRunner(engine, [Counter(fail_at=5)], poll_interval_s=0.05)
        projection = runner.projection("test-counter")
        task = asyncio.create_task(runner.run())
        await _until(lambda: _stopped_at(engine, projection, 5))
        await runner.skip(projection, 5, "poison")
        await _until(lambda: _stopped_at(engine, projection, None))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        found = await _status(engine, projection)
        assert (found.checkpoint, found.lag_events, found.failures) == (6, 0, 0)
        with pytest.raises(Conflict, match="is not stopped"):
            await runner.skip(projection, 5, "again")
        assert await applied_positions(engine) == [1, 3]

    async def test_the_leader_rebuilds_when_asked(self, engine: AsyncEngine) -> None:
        await append_counts(engine, 5)
        leader = ProjectionRunner(engine, [Counter()], poll_interval_s=0.05)
        task = asyncio.create_task(leader.run())
        await _until(lambda: _caught_up(engine, "test-counter"))
        async with engine.begin() as conn:  # damage the read model behind its back
            await conn.execute(delete(applied).where(applied.c.position > 3))
        asker = ProjectionRunner(engine, [Counter()])
        await asker.request_rebuild(asker.projection("test-counter"))

        async def rebuilt() -> bool:
            return not await asker.is_rebuild_requested(asker.projection("test-counter"))

        await _until(rebuilt)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert await applied_positions(engine) == [1, 3, 5, 7, 9]

    async def test_a_failed_rebuild_is_withdrawn_and_the_read_model_goes_on(
        self, engine: AsyncEngine
    ) -> None:
        """The leader tried the rebuild again before every step, so the projection
        applied nothing new until an operator stepped in (the dispatcher: no new tasks)."""
        await append_counts(engine, 3)  # t.count at positions 1, 3 and 5
        first = ProjectionRunner(engine, [Counter()])
        while await first.step(first.projection("test-counter")):
            pass
        leader = ProjectionRunner(engine, [Counter(fail_at=3)], poll_interval_s=0.05)
        projection = leader.projection("test-counter")
        task = asyncio.create_task(leader.run())
        await leader.request_rebuild(projection)

        async def withdrawn() -> bool:
            return not (await _status(engine, projection)).rebuild_requested

        await _until(withdrawn)
        await append_counts(engine, 1, "beta")  # position 7, after the failed rebuild
        await _until(lambda: _caught_up(engine, "test-counter"))
        assert await applied_positions(engine) == [1, 3, 5, 7]  # the old model, following
        found = await _status(engine, projection)
        assert (found.error_position, found.last_error, found.failures) == (
            3,
            "RuntimeError: cannot apply 3",
            1,
        )  # kept while it follows: what skip takes
        await leader.skip(projection, 3, "bad input")
        await leader.request_rebuild(projection)
        await _until(withdrawn)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert await applied_positions(engine) == [1, 5, 7]
        found = await _status(engine, projection)
        assert (found.error_position, found.last_error, found.failures) == (None, None, 0)

    async def test_notify_wakes_a_runner_long_before_its_poll(
        self, engine: AsyncEngine, database_url: URL
    ) -> None:
        dsn = database_url.set(drivername="postgresql").render_as_string(hide_password=False)
        runner = ProjectionRunner(engine, [Counter()], listen_dsn=dsn, poll_interval_s=60)
        task = asyncio.create_task(runner.run())

        async def listening() -> bool:  # else the NOTIFY goes to nobody (a busy machine)
            async with engine.connect() as conn:
                found = await conn.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND query LIKE 'LISTEN %'"
                    )
                )
            return bool(found)

        await _until(listening)
        await append_counts(engine, 1)
        await _until(lambda: _caught_up(engine, "test-counter"), timeout_s=10)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert await applied_positions(engine) == [1]


@pytest.mark.usefixtures("counter_table")
class TestLostLock:
    """Leadership is an advisory lock on one connection: when that connection dies, the
    lock is gone, and the runner must notice, and still stop when asked."""

    @staticmethod
    async def lock_holders(engine: AsyncEngine) -> list[int]:
        async with engine.connect() as conn:
            found = await conn.execute(
                text(
                    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND database"
                    " = (SELECT oid FROM pg_database WHERE datname = current_database())"
                )
            )
            return [row[0] for row in found]

    async def kill_the_lock(self, engine: AsyncEngine) -> None:
        await _until(lambda: self._held(engine))
        async with engine.connect() as conn:
            for pid in await self.lock_holders(engine):
                await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})

    async def _held(self, engine: AsyncEngine) -> bool:
        return bool(await self.lock_holders(engine))

    async def test_a_runner_whose_lock_died_still_stops_when_cancelled(
        self, engine: AsyncEngine
    ) -> None:
        # A long poll: the lead sits idle on its dead connection when it is cancelled, and
        # giving up the lock there must not swallow the cancellation.
        runner = ProjectionRunner(engine, [Counter()], poll_interval_s=5)
        task = asyncio.create_task(runner.run())
        await self.kill_the_lock(engine)
        await asyncio.sleep(0.3)
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=10)
        assert done, "the runner kept running after it was cancelled"

    async def test_a_runner_whose_lock_died_takes_the_lead_again(self, engine: AsyncEngine) -> None:
        runner = ProjectionRunner(engine, [Counter()], poll_interval_s=0.05)
        task = asyncio.create_task(runner.run())
        await _until(lambda: self._held(engine))
        killed = set(await self.lock_holders(engine))
        await self.kill_the_lock(engine)

        async def held_anew() -> bool:
            holders = set(await self.lock_holders(engine))
            return bool(holders) and not holders & killed

        # It notices while idle, starts over, and holds the lock on a live connection.
        await _until(held_anew)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _caught_up(engine: AsyncEngine, name: str) -> bool:
    async with engine.connect() as conn:
        [status] = await fetch_status(
            conn, [Counter()] if name == "test-counter" else [ModelRegistry(), Deployments()]
        )
    return status.lag_events == 0 and status.checkpoint > 0


async def _status(engine: AsyncEngine, projection: Any) -> Any:
    async with engine.connect() as conn:
        [found] = await fetch_status(conn, [projection])
    return found


async def _stopped_at(engine: AsyncEngine, projection: Any, position: int | None) -> bool:
    """Whether ``projection`` is stopped, failing, at ``position`` (None: not stopped)."""
    found = await _status(engine, projection)
    return bool(
        found.error_position == position and (position is None) == (found.last_error is None)
    )


async def _until(check: Any, timeout_s: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


_examples = itertools.count()
SIG = Signature.model_validate({"inputs": [{"type": "double"}], "outputs": [{"type": "long"}]})
commands = st.lists(
    st.one_of(
        st.tuples(st.just("register"), st.sampled_from("ab"), st.sampled_from("123")),
        st.tuples(
            st.just("alias"),
            st.sampled_from("ab"),
            st.sampled_from(["x", "y"]),
            st.sampled_from(["1", "2", None]),
        ),
        st.tuples(st.just("rollout"), st.sampled_from("123"), st.integers(0, 100)),
        st.tuples(st.just("traffic"), st.integers(0, 100)),
        st.tuples(st.just("promote")),
        st.tuples(st.just("rollback")),
    ),
    min_size=1,
    max_size=14,
)


def script_events(script: list[tuple[Any, ...]]) -> list[NewEvent]:
    """Events for a random script; deployment steps that make no sense are left out, as
    the commands would refuse them (models are registered up front)."""
    found = [registration_event("m", v, SIG, {}, enforce_outputs=False) for v in "123"]
    state = DeploymentState("svc")
    for n, step in enumerate(script):
        try:
            if step[0] == "register":
                event = registration_event(step[1], step[2], SIG, {}, enforce_outputs=False)
            elif step[0] == "alias":
                event = alias_event(step[1], step[2], step[3], n)
            elif step[0] == "rollout":
                event = deploy.start_rollout(
                    state,
                    model="m",
                    version=step[1],
                    percent=step[2],
                    strategy="canary",
                    reason=None,
                    actor="test",
                )
            elif step[0] == "traffic":
                event = deploy.shift_traffic(state, percent=step[1], reason=None, actor="test")
            elif step[0] == "promote":
                event = deploy.promote(state, reason=None, actor="test")
            else:
                event = deploy.rollback(state, reason="test", actor="test")
        except Conflict:
            continue
        if event.type in deploy.TYPES:
            state = deploy.fold(state, event.type, event.data)
        found.append(event)
    return found


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(script=commands, batch=st.integers(min_value=1, max_value=5))
async def test_every_projection_rebuilds_to_its_incremental_state(
    engine: AsyncEngine, script: list[tuple[Any, ...]], batch: int
) -> None:
    to_append = script_events(script)
    for projection in (ModelRegistry(), Deployments()):
        tenant_name = f"p{next(_examples)}"  # a fresh tenant per run: the database is shared
        runner = ProjectionRunner(engine, [projection], batch_size=batch)
        for start in range(0, len(to_append), 3):
            async with engine.begin() as conn:
                await EventLog(conn).append(tenant_name, to_append[start : start + 3])
            await runner.catch_up(projection)
        incremental = await _snapshot(engine, projection)
        await runner.rebuild(projection)
        assert await _snapshot(engine, projection) == incremental


async def _snapshot(engine: AsyncEngine, projection: Any) -> list[list[tuple[Any, ...]]]:
    async with engine.connect() as conn:
        return [
            sorted(tuple(row) for row in await conn.execute(select(table)))
            for table in projection.tables
        ]


def test_one_list_names_every_projection_once() -> None:
    names = [p.name for p in every_projection()]
    assert len(names) == len(set(names))
    assert {ModelRegistry().name, Deployments().name} <= set(names)


async def test_a_projection_with_nothing_to_read_does_not_commit_for_every_batch(
    engine: AsyncEngine, counter_table: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While others' events stream in, a projection that reads none of them moves its
    checkpoint when it is woken or polls, not again and again: each move is a commit."""
    others = itertools.count()

    async def append_others(count: int) -> None:
        batch = [
            NewEvent(id=f"x{next(others)}", source="/s", type="t.other", stream="o")
            for _ in range(count)
        ]
        async with engine.begin() as conn:
            await EventLog(conn).append("acme", batch)

    moves = 0
    advance = checkpoints_module.advance

    async def advance_as_more_arrive(*args: Any, **kwargs: Any) -> None:
        nonlocal moves
        moves += 1
        await advance(*args, **kwargs)
        if moves < 20:  # a batch's worth more by its next step: a steady stream
            await append_others(60)

    monkeypatch.setattr(checkpoints_module, "advance", advance_as_more_arrive)
    await append_others(100)
    runner = ProjectionRunner(engine, [Counter()], batch_size=50, poll_interval_s=30)
    task = asyncio.create_task(runner.run())
    async with asyncio.timeout(20):  # its first step, whenever the machine lets it
        while moves == 0:
            await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # time for the steps it should not take
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert moves == 1


class Tally:
    """Reads two columns of its events, a batch's rows at once, and writes what a batch
    saw when it ends (``Tallying``, ``Flushing``); refuses the event ``refuse``."""

    name = "test-tally"
    tables = (applied,)
    types = frozenset({"t.count"})
    columns = (events.c.position, events.c.id)

    def __init__(self, refuse: str | None = None) -> None:
        self.batches: list[list[tuple[Any, ...]]] = []
        self.pending: list[int] = []
        self.flushes = 0
        self.refuse = refuse

    async def tally(self, conn: AsyncConnection, rows: Sequence[Any]) -> None:
        self.batches.append([tuple(row) for row in rows])
        for row in rows:
            if row.id == self.refuse:
                self.pending.clear()  # the batch is rolled back
                raise FlushFailed(row.position) from ValueError(f"{row.id} refused")
            self.pending.append(row.position)

    async def flush(self, conn: AsyncConnection) -> None:
        self.flushes += 1
        await conn.execute(insert(applied), [{"position": p} for p in self.pending])
        self.pending.clear()


async def append_tallied(engine: AsyncEngine) -> list[int]:
    batch = [
        NewEvent(id=f"d{i}", source="/s", type="t.count", stream="s", has_data=True, data=[i] * 9)
        for i in range(10)
    ]
    async with engine.begin() as conn:
        appended = await EventLog(conn).append("acme", batch)
    return [a.position for a in appended]


async def test_a_tally_gets_its_columns_a_batch_at_once_and_writes_once_a_batch(
    engine: AsyncEngine, counter_table: None
) -> None:
    positions = await append_tallied(engine)
    tally = Tally()
    runner = ProjectionRunner(engine, [tally], batch_size=4)
    await runner.catch_up(tally)
    assert await applied_positions(engine) == positions
    ids = [f"d{i}" for i in range(10)]
    rows = list(zip(positions, ids, strict=True))
    assert tally.batches == [rows[:4], rows[4:8], rows[8:]]  # its two columns, nothing else
    assert tally.flushes == 3
    # A rebuild empties the table and writes it again, flushing at its end.
    await runner.rebuild(tally)
    assert await applied_positions(engine) == positions
    assert tally.batches[3:] == [rows]


async def test_a_tally_that_refuses_a_row_stops_at_that_event(
    engine: AsyncEngine, counter_table: None
) -> None:
    positions = await append_tallied(engine)
    tally = Tally(refuse="d6")
    runner = ProjectionRunner(engine, [tally], batch_size=100)
    with pytest.raises(ProjectionFailed) as failed:
        await runner.catch_up(tally)
    assert failed.value.position == positions[6]
    assert "d6 refused" in str(failed.value)
    # What the runner does next: keep what came before it.
    while await runner.step(tally, until=failed.value.position - 1):
        pass
    assert await applied_positions(engine) == positions[:6]
