"""Reads on real streaming replicas that the replica tests of test_replicas.py did not
reach: GraphQL's walks on a replica that froze or restarted since it was last checked,
and a stream's next-page link followed to a replica behind the one that answered."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import AsyncIterator, Iterator
from secrets import token_hex

import httpx2
import pytest

from tests.integration.app.web.test_replicas import (
    AUDIT,
    _signal_replica,
    admin_of,
    running,
    write_a_run,
)
from tests.integration.events import STRUCTURED, dumps, event
from tests.integration.process import free_port
from tests.integration.replicas import Pair, Server


async def test_a_graphql_walk_answers_when_the_replica_froze_between_two_checks(
    pair: Pair,
) -> None:
    """docs/replicas.md: a replica that does not answer within 2 s (a frozen host) is
    taken as gone, and the read goes to the primary. The walks' pool handed out an idle
    connection unchecked, and setting its tenant had no bound: the audit hung for as long
    as the replica stayed frozen."""
    run = f"froze-{token_hex(3)}"
    primary = pair.primary.url()
    async with (
        running(primary, read_database_url=pair.replica.url()) as app,
        await admin_of(app, primary) as admin,
    ):
        await write_a_run(admin, run)
        pair.wait_for_replay()
        await app.state.read_router.check()
        audit = {"query": AUDIT % f"{run}-face"}
        before = await admin.post("/graphql", json=audit)  # on the replica: pool warm
        assert before.status_code == 200, before.text
        _signal_replica(pair, signal.SIGSTOP)
        try:
            started = time.monotonic()
            try:
                answer = await asyncio.wait_for(admin.post("/graphql", json=audit), 20)
                outcome: object = (answer.status_code, answer.text)
            except TimeoutError:
                outcome = f"no answer in {time.monotonic() - started:.0f} s"
        finally:
            _signal_replica(pair, signal.SIGCONT)
    assert outcome == (200, before.text)


async def test_a_replica_back_from_a_restart_serves_graphql_walks(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/replicas.md: a replica's pooled connections are tested at checkout, so one a
    restart broke is replaced. The walks' pool handed out the broken one: the first audit
    after the replica came back marked it down again and logged it skipped."""
    run = f"restart-{token_hex(3)}"
    primary = pair.primary.url()
    async with (
        running(primary, read_database_url=pair.replica.url()) as app,
        await admin_of(app, primary) as admin,
    ):
        router = app.state.read_router
        await write_a_run(admin, run)
        pair.wait_for_replay()
        await router.check()
        audit = {"query": AUDIT % f"{run}-face"}
        before = await admin.post("/graphql", json=audit)  # a walk on the replica
        assert before.status_code == 200, before.text
        pair.replica.stop()
        try:
            await router.check()
            assert not router.replicas[0].is_usable
        finally:
            pair.replica.start()
        await router.check()
        assert router.replicas[0].is_usable  # back
        caplog.clear()  # what was logged while it was down
        with caplog.at_level(logging.INFO, logger="app.web.reads"):
            after = await admin.post("/graphql", json=audit)
        state = (router.replicas[0].is_usable, router.replicas[0].why)
    assert after.text == before.text
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert (state, skipped) == ((True, "in use"), [])


def second_replica(pair: Pair) -> Server:
    """Another streaming standby of ``pair``'s primary, as ``Pair.create`` makes the first."""
    server = Server(pair, pair._root / "replica2", free_port())
    pair.run("pg_basebackup", "-h", "127.0.0.1", "-p", str(pair.primary.port), "-U", "postgres",
             "-D", str(server.folder), "-R", "-X", "stream", "-c", "fast")  # fmt: skip
    with (server.folder / "postgresql.conf").open("a") as conf:
        conf.write(f"port = {server.port}\n")
    server.start()
    return server


def wait_for_replay(primary: Server, replica: Server, timeout_s: float = 10.0) -> None:
    [(lsn,)] = primary.execute("SELECT pg_current_wal_lsn()::text")
    deadline = time.monotonic() + timeout_s
    while not replica.execute(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn")[0][0]:
        assert time.monotonic() < deadline, "the replica did not catch up"
        time.sleep(0.02)


def pause(replica: Server) -> None:
    replica.execute("SELECT pg_wal_replay_pause()")
    deadline = time.monotonic() + 10
    while replica.execute("SELECT pg_get_wal_replay_pause_state()") != [("paused",)]:
        assert time.monotonic() < deadline, "replay did not pause"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def other(pair: Pair) -> Iterator[Server]:
    server = second_replica(pair)
    try:
        wait_for_replay(pair.primary, server)
        yield server
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def one_replica_behind(
    pair: Pair, other: Server, stream: str
) -> AsyncIterator[httpx2.AsyncClient]:
    """A service reading on two replicas in turn, ``other`` one event of ``stream`` behind
    (its replay paused, well within CAUSEWAY_READ_MAX_LAG_S): an admin's client."""
    primary = pair.primary.url()
    urls = f"{pair.replica.url()},{other.url()}"
    async with (
        running(primary, read_database_url=urls) as app,
        await admin_of(app, primary) as admin,
    ):
        first = await admin.post(
            "/events", content=dumps(event(subject=stream)), headers=STRUCTURED
        )
        assert first.status_code == 201, first.text
        wait_for_replay(pair.primary, pair.replica)
        wait_for_replay(pair.primary, other)
        pause(other)
        try:
            second = await admin.post(
                "/events", content=dumps(event(subject=stream)), headers=STRUCTURED
            )
            assert second.status_code == 201, second.text
            wait_for_replay(pair.primary, pair.replica)
            await app.state.read_router.check()
            assert [r.is_usable for r in app.state.read_router.replicas] == [True, True]
            yield admin
        finally:
            other.execute("SELECT pg_wal_replay_resume()")


async def test_following_a_streams_next_link_never_loses_the_events_it_announced(
    pair: Pair, other: Server
) -> None:
    """README: GET /streams answers "when more follow, Link: <the next page>". Two
    replicas, one a moment behind, serve reads in turn: a page read on the one ahead
    announced a next page, and its link, read on the other, answered an empty last page
    (200, no Link): the stream seemed to end short of what it had announced. The link
    names the position of the event it starts with (min_position)."""
    stream = f"paged-{token_hex(3)}"
    async with one_replica_behind(pair, other, stream) as admin:
        # Page one, until it is read where the second event shows (the replica ahead).
        for _ in range(4):
            page = await admin.get(f"/streams/{stream}", params={"limit": "1"})
            if "Link" in page.headers:
                break
        assert "Link" in page.headers, page.text
        link = page.headers["Link"].split(">")[0].lstrip("<").removeprefix("http://causeway")
        followed = [await admin.get(link) for _ in range(2)]
    # Each time the link is followed, the page it announced: the second event.
    assert [(f.status_code, len(f.json())) for f in followed] == [(200, 1), (200, 1)]


STREAM_PAGE = """query ($id: String!, $after: String) {
  stream(id: $id, first: 1, after: $after) {
    edges { node { id } } pageInfo { hasNextPage endCursor }
  }
}"""


async def test_a_graphql_page_after_an_end_cursor_shows_what_its_page_announced(
    pair: Pair, other: Server
) -> None:
    """The same with GraphQL's stream connection: a page read on the replica ahead said
    hasNextPage, and the page after its endCursor, read on the one behind, was empty. The
    cursor names the position of the event its page knew came next."""
    stream = f"graphql-paged-{token_hex(3)}"
    async with one_replica_behind(pair, other, stream) as admin:
        ask = {"query": STREAM_PAGE, "variables": {"id": stream}}
        for _ in range(4):  # until it is read where the second event shows
            page = (await admin.post("/graphql", json=ask)).json()["data"]["stream"]
            if page["pageInfo"]["hasNextPage"]:
                break
        assert page["pageInfo"]["hasNextPage"], page
        after = {
            "query": STREAM_PAGE,
            "variables": {"id": stream, "after": page["pageInfo"]["endCursor"]},
        }
        followed = [
            (await admin.post("/graphql", json=after)).json()["data"]["stream"] for _ in range(2)
        ]
    assert [len(f["edges"]) for f in followed] == [1, 1], followed
