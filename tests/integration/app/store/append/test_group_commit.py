"""Group commit: many concurrent requests share transactions, yet each gets its own answer;
and the global order stays gap-free with writers in two server processes."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import orjson
import psycopg
import pytest
from fastapi import FastAPI
from sqlalchemy import URL, text
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.db.engine import async_url, driver_of
from app.errors import BadRequest, Unavailable, UnknownCause
from app.store.append import group_commit
from app.store.append.group_commit import Appender
from app.store.failures import as_app_error
from app.store.log import append_on
from app.store.records import NewEvent
from app.store.verify import verify_chain
from tests.in_process import serving as serving_in_process
from tests.integration.conftest import MakeKey
from tests.integration.events import BATCH, STRUCTURED, dumps
from tests.integration.events import event as cloudevent
from tests.integration.process import create_key, environment, serving

Mix = list[tuple[str, bytes, int, str | None]]


def mix(seeded: dict[str, Any], *, batch: bool) -> Mix:
    """64 requests, in turn valid, a re-send of ``seeded``, a version conflict and an
    unknown cause: (kind, body, status, problem type). As batches (the valid ones of two
    events, the conflict late in its batch), or as one event a request."""
    requests: Mix = []
    for i in range(64):
        kind = ("valid", "duplicate", "conflict", "unknown-cause")[i % 4]
        if kind == "valid":
            events = [cloudevent(stream=f"s{i}") for _ in range(2 if batch else 1)]
            expected: tuple[int, str | None] = (201, None)
        elif kind == "duplicate":
            events, expected = [seeded], (200, None)
        elif kind == "conflict":
            events = [cloudevent(stream=f"c{i}")] if batch else []
            events.append(cloudevent(stream="orders", expectedversion=7))
            expected = (409, "/problems/version-conflict")
        else:
            events = [cloudevent(causationid=f"missing-{i}")]
            expected = (422, "/problems/unknown-cause")
        requests.append((kind, dumps(events if batch else events[0]), *expected))
    return requests


def assert_each_answered(requests: Mix, responses: list[httpx2.Response]) -> None:
    """Each request got its own answer: its status and problem, the re-send its stored
    position, the valid ones their events, in order, at versions 1, 2, ..."""
    for (kind, sent_body, status, problem), response in zip(requests, responses, strict=True):
        assert response.status_code == status, (kind, response.text)
        if problem:
            assert response.json()["type"] == problem
        elif kind == "duplicate":
            assert response.json()["events"][0]["position"] == 1
        else:
            sent = orjson.loads(sent_body)
            sent = sent if isinstance(sent, list) else [sent]
            answers = response.json()["events"]
            assert [e["id"] for e in answers] == [e["id"] for e in sent]
            assert [e["stream_version"] for e in answers] == list(range(1, len(sent) + 1))


async def test_64_concurrent_requests_each_get_their_own_answer(
    client: httpx2.AsyncClient, app: FastAPI, engine: AsyncEngine
) -> None:
    seeded = cloudevent(stream="orders")
    await client.post("/events", content=dumps(seeded), headers=STRUCTURED)
    requests = mix(seeded, batch=True)
    appender = app.state.appender
    groups_before = appender.groups_committed
    responses = await asyncio.gather(
        *(client.post("/events", content=body, headers=BATCH) for _, body, _, _ in requests)
    )
    assert_each_answered(requests, responses)
    # 32 requests wrote events; sharing transactions, they took fewer than 32 commits.
    assert appender.groups_committed - groups_before < 32, "requests were not grouped"
    replay = (await client.get("/replay")).text.splitlines()
    assert len(replay) == 1 + 16 * 2
    assert [orjson.loads(line)["position"] for line in replay] == list(range(1, 34))
    async with engine.connect() as conn:
        assert (await verify_chain(conn)).is_intact


async def test_64_concurrent_events_over_the_wire_each_get_their_own_answer(
    app: FastAPI, engine: AsyncEngine, make_key: MakeKey
) -> None:
    """The same mix as one event a request, over real connections to ``causeway serve``'s
    protocol: each is handed to the app without ASGI and answered as its group lands."""
    key = await make_key("acme", "ingest,read")
    async with (
        serving_in_process(app, lifespan="off") as port,
        httpx2.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}
        ) as client,
    ):
        seeded = cloudevent(stream="orders")
        assert (await client.post("/events", content=dumps(seeded), headers=STRUCTURED)).is_success
        requests = mix(seeded, batch=False)
        groups_before = app.state.appender.groups_committed
        responses = await asyncio.gather(
            *(client.post("/events", content=body, headers=STRUCTURED) for _, body, *_ in requests)
        )
    assert_each_answered(requests, responses)
    assert app.state.appender.groups_committed - groups_before < 16, "requests were not grouped"
    async with engine.connect() as conn:
        positions = (await conn.execute(text("SELECT position FROM events ORDER BY 1"))).scalars()
        assert list(positions) == list(range(1, 1 + 1 + 16))
        assert (await verify_chain(conn)).is_intact


def test_the_reader_never_skips_with_writers_in_two_server_processes(
    database_url: URL, tmp_path: Path
) -> None:
    env = environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
    )
    key = create_key(env, "acme", "ingest,read")
    libpq = database_url.set(drivername="postgresql").render_as_string(hide_password=False)
    with serving(env) as first, serving(env) as second:
        seen = asyncio.run(_write_and_follow([first, second], key, libpq))
    with psycopg.connect(libpq) as conn:
        stored = [r[0] for r in conn.execute("SELECT position FROM events ORDER BY position")]
        common = conn.execute(
            "SELECT stream_version FROM events WHERE stream = 'common' ORDER BY position"
        )
        versions = [r[0] for r in common]
    assert seen == stored == list(range(1, len(stored) + 1))
    assert len(stored) == 8 * 30 * 2
    # Both processes wrote to one stream: its versions are dense, in position order.
    assert versions == list(range(1, 8 * 30 + 1))
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "verify"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


async def _write_and_follow(servers: list[str], key: str, libpq: str) -> list[int]:
    done = asyncio.Event()
    seen: list[int] = []

    async def write(writer: int) -> None:
        base = servers[writer % len(servers)]
        async with httpx2.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as client:
            for i in range(30):
                body = [cloudevent(stream=f"w{writer}-{i}"), cloudevent(stream="common")]
                response = await client.post("/events", content=dumps(body), headers=BATCH)
                assert response.status_code == 201, response.text

    async def follow() -> None:
        last = 0
        async with await psycopg.AsyncConnection.connect(libpq, autocommit=True) as conn:
            while True:
                finished = done.is_set()
                rows = await conn.execute(
                    "SELECT position FROM events WHERE position > %s ORDER BY position", (last,)
                )
                batch = [r[0] for r in await rows.fetchall()]
                seen.extend(batch)
                last = batch[-1] if batch else last
                if finished and not batch:
                    return
                await asyncio.sleep(0.001)

    reader = asyncio.create_task(follow())
    await asyncio.gather(*(write(w) for w in range(8)))
    done.set()
    await reader
    return seen


async def test_a_value_postgresql_refuses_fails_only_its_own_request(engine: AsyncEngine) -> None:
    appender = Appender(engine)
    good = [NewEvent(id=f"good-{n}", source="/s", type="t", stream="s") for n in range(5)]
    # Past every check of the binding (built directly): a NUL that only COPY refuses.
    bad = NewEvent(id="bad", source="/s\x00", type="t", stream="s")
    outcomes = await asyncio.gather(
        *(appender.append("acme", [e]) for e in good[:3]),
        appender.append("acme", [bad]),
        *(appender.append("acme", [e]) for e in good[3:]),
        return_exceptions=True,
    )
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(refused) == 1
    assert isinstance(refused[0], psycopg.DataError)
    assert sorted(o[0].id for o in outcomes if isinstance(o, list)) == sorted(e.id for e in good)
    await appender.close()


async def test_a_request_whose_planning_raises_fails_alone(engine: AsyncEngine) -> None:
    # Built directly, past the binding's depth limit: data the chain's encoding cannot
    # write, so planning this request raises inside the group's transaction.
    deep: object = 1
    for _ in range(300):
        deep = [deep]
    bad = NewEvent(id="deep", source="/s", type="t", stream="s", has_data=True, data=deep)
    good = [NewEvent(id=f"good-{n}", source="/s", type="t", stream="s") for n in range(6)]
    appender = Appender(engine)
    outcomes = await asyncio.gather(
        *(appender.append("acme", [e]) for e in good[:3]),
        appender.append("other-tenant", [bad]),
        *(appender.append("acme", [e]) for e in good[3:]),
        return_exceptions=True,
    )
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert [type(o) for o in refused] == [TypeError]
    assert sorted(o[0].id for o in outcomes if isinstance(o, list)) == sorted(e.id for e in good)
    await appender.close()
    async with engine.connect() as conn:
        assert (await verify_chain(conn)).count == len(good)


async def test_a_request_past_postgresqls_limits_fails_alone_and_is_a_400(
    engine: AsyncEngine,
) -> None:
    """A stream too long for an index entry (a third of a page; random text, which
    PostgreSQL cannot compress): SQLSTATE 54000, which psycopg makes an OperationalError.
    It failed every request of its group, as an unreachable database does, and answered
    503 "retry"; it is the request's own fault, and no retry can succeed."""
    long = secrets.token_hex(2000)
    bad = NewEvent(id="long", source="/s", type="t", stream=long)
    good = [NewEvent(id=f"good-{n}", source="/s", type="t", stream="s") for n in range(6)]
    appender = Appender(engine)
    outcomes = await asyncio.gather(
        *(appender.append("acme", [e]) for e in good[:3]),
        appender.append("other-tenant", [bad]),
        *(appender.append("acme", [e]) for e in good[3:]),
        return_exceptions=True,
    )
    [refused] = [o for o in outcomes if isinstance(o, BaseException)]
    assert isinstance(refused, psycopg.errors.ProgramLimitExceeded)
    named = as_app_error(refused)
    assert isinstance(named, BadRequest)
    assert "past what PostgreSQL can store or index" in named.detail
    assert sorted(o[0].id for o in outcomes if isinstance(o, list)) == sorted(e.id for e in good)
    await appender.close()
    async with engine.connect() as conn:
        assert (await verify_chain(conn)).count == len(good)


async def test_after_the_server_drops_every_connection_only_one_group_fails(
    engine: AsyncEngine,
) -> None:
    appender = Appender(engine)
    [first] = await appender.append("acme", [NewEvent(id="e1", source="/s", type="t", stream="s")])
    held = [await engine.connect() for _ in range(3)]  # idle connections in the pool
    for conn in held:
        await conn.close()
    async with engine.connect() as conn:  # as a restart would: every other session ends
        await conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    lost = NewEvent(id="e2", source="/s", type="t", stream="s")
    with pytest.raises(psycopg.OperationalError):
        await appender.append("acme", [lost])  # nothing written: the client gets a 503
    [again] = await appender.append("acme", [lost])
    [after] = await appender.append("acme", [NewEvent(id="e3", source="/s", type="t", stream="s")])
    assert (first.position, again.position, after.position) == (1, 2, 3)
    await appender.close()


async def test_an_append_after_close_gives_its_connection_back(engine: AsyncEngine) -> None:
    appender = Appender(engine)
    await appender.append("acme", [NewEvent(id="e1", source="/s", type="t", stream="s")])
    await appender.close()
    await appender.append("acme", [NewEvent(id="e2", source="/s", type="t", stream="s")])
    async with asyncio.timeout(5):  # the group's task gives it back after answering
        while engine.pool.checkedout():  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)


async def test_requests_after_a_refused_one_are_written_in_the_same_group(
    engine: AsyncEngine,
) -> None:
    # Each request's rows go out as soon as it is planned; one refused in the middle
    # of a group sends nothing, and the requests around it still land, in order.
    appender = Appender(engine)
    first = [NewEvent(id=f"a{n}", source="/s", type="t", stream="s") for n in range(300)]
    orphan = [NewEvent(id="b", source="/s", type="t", stream="s", causes=("missing",))]
    last = [NewEvent(id=f"c{n}", source="/s", type="t", stream="s") for n in range(300)]
    outcomes = await asyncio.gather(
        appender.append("acme", first),
        appender.append("acme", orphan),
        appender.append("acme", last),
        return_exceptions=True,
    )
    assert appender.groups_committed == 1
    assert [a.position for a in outcomes[0]] == list(range(1, 301))  # type: ignore[union-attr]
    assert isinstance(outcomes[1], UnknownCause)
    assert [a.position for a in outcomes[2]] == list(range(301, 601))  # type: ignore[union-attr]
    assert [a.stream_version for a in outcomes[2]][:2] == [301, 302]  # type: ignore[union-attr]
    async with engine.connect() as conn:
        assert (await verify_chain(conn)).is_intact
    await appender.close()


async def test_a_group_of_re_sends_leaves_the_connection_ready(engine: AsyncEngine) -> None:
    appender = Appender(engine)
    sent = NewEvent(id="e1", source="/s", type="t", stream="s")
    [first] = await appender.append("acme", [sent])
    [again] = await appender.append("acme", [sent])  # writes nothing
    async with engine.connect() as conn:  # and leaves the head free
        await conn.execute(text("SELECT 1 FROM log_head FOR UPDATE NOWAIT"))
    [after] = await appender.append("acme", [NewEvent(id="e2", source="/s", type="t", stream="s")])
    assert (first.position, again.position, again.duplicate, after.position) == (1, 1, True, 2)
    await appender.close()


async def test_the_appenders_connection_goes_back_out_of_autocommit(engine: AsyncEngine) -> None:
    # The appender runs its connection in autocommit (its statements begin and commit
    # the group); whoever takes that connection from the pool next gets transactions.
    appender = Appender(engine)
    await appender.append("acme", [NewEvent(id="e1", source="/s", type="t", stream="s")])
    await appender.close()
    held = [await engine.connect() for _ in range(engine.pool.size())]  # type: ignore[attr-defined]
    try:
        assert not any([(await driver_of(conn)).autocommit for conn in held])
    finally:
        for conn in held:
            await conn.close()


@pytest.mark.parametrize("isolation", ["read committed", "repeatable read"])
async def test_two_appenders_racing_on_the_same_ids_never_write_one_twice(
    database_url: URL, isolation: str
) -> None:
    # Two appenders are two connections, as two server processes are: each group's
    # lookups run after it holds the head, so they see what the other just committed,
    # and a re-send is answered as a duplicate, never refused by the unique index; also
    # where the database's default isolation would give the lookups an older snapshot.
    default = isolation.replace(" ", "\\ ")
    engine = create_async_engine(
        async_url(database_url),
        connect_args={"options": f"-c default_transaction_isolation={default}"},
    )
    first, second = Appender(engine), Appender(engine)
    events = [NewEvent(id=f"e{n}", source="/s", type="t", stream=f"s{n}") for n in range(40)]
    answers = await asyncio.gather(
        *(appender.append("acme", [e]) for e in events for appender in (first, second))
    )
    for n in range(40):
        [a], [b] = answers[2 * n], answers[2 * n + 1]
        assert sorted([a.duplicate, b.duplicate]) == [False, True]
        assert a.position == b.position
    assert sorted(a.position for [a] in answers if not a.duplicate) == list(range(1, 41))
    await first.close()
    await second.close()
    await engine.dispose()


async def test_an_id_the_connections_encoding_cannot_carry_fails_only_its_request(
    engine: AsyncEngine, database_url: URL
) -> None:
    latin1 = create_async_engine(
        async_url(database_url), connect_args={"options": "-c client_encoding=LATIN1"}
    )
    appender = Appender(latin1)
    outcomes = await asyncio.gather(
        appender.append("acme", [NewEvent(id="é", source="/s", type="t", stream="s")]),
        appender.append("acme", [NewEvent(id="✓", source="/s", type="t", stream="s")]),
        appender.append("acme", [NewEvent(id="e", source="/s", type="t", stream="s")]),
        return_exceptions=True,
    )
    assert isinstance(outcomes[1], psycopg.DataError)
    assert [o[0].position for o in (outcomes[0], outcomes[2])] == [1, 2]  # type: ignore[index]
    await appender.close()
    await latin1.dispose()
    async with engine.connect() as conn:
        assert (await verify_chain(conn)).is_intact


async def test_requests_queued_behind_a_cancelled_group_are_answered(
    engine: AsyncEngine, database_url: URL
) -> None:
    # The server stops while a group waits for the head: the requests queued behind it
    # get a 503 to send again, rather than no answer at all.
    appender = Appender(engine)
    await appender.append("acme", [NewEvent(id="e0", source="/s", type="t", stream="s")])
    async with await psycopg.AsyncConnection.connect(
        database_url.set(drivername="postgresql").render_as_string(hide_password=False)
    ) as holder:
        await holder.execute("SELECT 1 FROM log_head FOR UPDATE")
        waiting = asyncio.ensure_future(
            appender.append("acme", [NewEvent(id="e1", source="/s", type="t", stream="s")])
        )
        await asyncio.sleep(0.2)  # its group waits for the head
        queued = asyncio.ensure_future(
            appender.append("acme", [NewEvent(id="e2", source="/s", type="t", stream="s")])
        )
        await asyncio.sleep(0.1)
        assert appender._writer is not None
        appender._writer.cancel()
        await asyncio.wait([waiting, queued], timeout=5)
        await holder.rollback()
    assert waiting.done()
    assert queued.done()
    assert isinstance(queued.exception(), Unavailable)
    await appender.close()
    async with engine.connect() as conn:  # neither was written, and the chain holds
        assert (await conn.execute(text("SELECT id FROM events"))).scalars().all() == ["e0"]
        assert (await verify_chain(conn)).is_intact


async def test_a_group_that_finds_no_connection_is_answered(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    appender = Appender(engine, quiet_groups=1)
    for n in range(3):  # planned ahead from here on
        await appender.append("acme", [NewEvent(id=f"w{n}", source="/s", type="t", stream="s")])

    async def no_connection() -> None:
        raise PoolTimeout("no connection came free")

    late = NewEvent(id="x", source="/s", type="t", stream="s")
    monkeypatch.setattr(appender._held, "take", no_connection)
    try:
        with pytest.raises(PoolTimeout):
            await asyncio.wait_for(appender.append("acme", [late]), timeout=5)
        monkeypatch.undo()
        [x] = await appender.append("acme", [late])  # and the appender goes on
    finally:
        monkeypatch.undo()
        await appender.close()
    assert x.position == 4


def _event(event_id: str, **fields: Any) -> NewEvent:
    return NewEvent(id=event_id, source="/s", type="t", stream="s", **fields)


async def test_a_re_send_waiting_for_the_groups_ahead_is_answered_when_the_server_stops(
    engine: AsyncEngine, database_url: URL
) -> None:
    # A re-send of an id the tail knows goes under the lock once the groups on their way
    # have landed: the writer had taken it off the queue, and answered it never.
    appender = Appender(engine, quiet_groups=2)
    try:
        for n in range(4):  # from the second on, planned ahead
            await appender.append("acme", [_event(f"w{n}")])
        async with await psycopg.AsyncConnection.connect(
            database_url.set(drivername="postgresql").render_as_string(hide_password=False)
        ) as holder:
            await holder.execute("SELECT 1 FROM log_head FOR UPDATE")
            ahead = asyncio.ensure_future(appender.append("acme", [_event("f1")]))
            await asyncio.sleep(0.2)  # planned ahead, waiting at the head
            resend = asyncio.ensure_future(appender.append("acme", [_event("w3")]))
            await asyncio.sleep(0.2)
            assert appender._writer is not None
            appender._writer.cancel()
            await asyncio.wait([ahead, resend], timeout=5)
            await holder.rollback()
        assert isinstance(resend.exception(), Unavailable)
        assert ahead.done()
    finally:
        await appender.close()


async def test_requests_retried_alone_are_answered_when_the_server_stops(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A group holding a value PostgreSQL refuses is written again a request at a time;
    # stopped meanwhile, the requests not yet written again were never answered.
    appender = Appender(engine, plan_ahead=False)
    await appender.append("acme", [_event("w")])
    real, calls = append_on, 0

    async def slow_append_on(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 3:  # the second request alone: waiting for the head, say
            await asyncio.sleep(30)
        return await real(*args, **kwargs)

    monkeypatch.setattr(group_commit, "append_on", slow_append_on)
    try:
        answers = [
            asyncio.ensure_future(appender.append("acme", [event]))
            for event in (_event("bad", has_data=True, data="\x00"), _event("r2"), _event("r3"))
        ]
        await asyncio.wait([answers[0]], timeout=5)
        assert appender._writer is not None
        appender._writer.cancel()
        await asyncio.wait(answers, timeout=5)
        assert isinstance(answers[0].exception(), psycopg.DataError)
        assert [type(a.exception()) for a in answers[1:]] == [Unavailable, Unavailable]
    finally:
        monkeypatch.undo()
        await appender.close()


async def test_an_append_while_a_closed_appender_lets_go_of_its_connections_is_written(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After close(), a late group starts a writer that gives its connections back when
    # done (a round trip each): a request that came meanwhile stayed queued for good.
    appender = Appender(engine, plan_ahead=False)
    await appender.append("acme", [_event("w")])
    await appender.close()
    release = appender._held.release

    async def slow_release() -> None:  # a round trip on a slower network
        await asyncio.sleep(0.3)
        await release()

    monkeypatch.setattr(appender._held, "release", slow_release)
    await asyncio.wait_for(appender.append("acme", [_event("a")]), timeout=5)
    [b] = await asyncio.wait_for(appender.append("acme", [_event("b")]), timeout=5)
    assert b.position == 3
    await appender.close()  # once every writer, the ones giving back too, is done
    assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
