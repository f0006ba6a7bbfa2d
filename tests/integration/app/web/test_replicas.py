"""Reads on a real streaming replica (started here, ``pg_basebackup -R``), and
read-your-writes with ``Causeway-Position`` on a replica and on the primary alone."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from pathlib import Path
from secrets import token_hex
from typing import Any

import httpx2
import orjson
import pytest
from fastapi import FastAPI
from sqlalchemy import URL
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.engine import Connector, create_engine
from app.main import create_app
from app.settings import Settings
from app.store.keys import KeyStore, parse_scopes
from app.web.reads import ReadRouter
from tests.conftest import janitor
from tests.integration.conftest import asgi_client
from tests.integration.events import JSON, STRUCTURED, dumps, event, registration
from tests.integration.replicas import Pair

AUDIT = '{ audit(decisionId: "%s") { sourceEvents { id } derivedEvents { id } chainVerified } }'


@asynccontextmanager
async def running(database_url: str | URL, **settings: Any) -> AsyncIterator[FastAPI]:
    """The app as ``serve`` runs it (its lifespan: projections, the replica watcher)."""
    app = create_app(Settings(_env_file=None, **settings), database_url=database_url)
    async with app.router.lifespan_context(app):
        await app.state.read_router.check()  # as the watcher does at once
        yield app


async def admin_of(app: FastAPI, database_url: str | URL) -> httpx2.AsyncClient:
    engine = create_engine(database_url, pool_size=1)
    try:
        async with engine.begin() as conn:
            issued = await KeyStore(conn).create("acme", parse_scopes("admin"))
    finally:
        await engine.dispose()
    return asgi_client(app, issued.key)


def at(position: str) -> dict[str, str]:
    return {"Causeway-Min-Position": position}


async def write_a_run(admin: httpx2.AsyncClient, run: str) -> str:
    """A model version, a frame and a face derived from it; the last write's position."""
    registered = await admin.post(
        f"/models/{run}/versions", content=registration("1"), headers=JSON
    )
    assert registered.status_code == 201
    frame = event(id=f"{run}-frame", correlationid=run, subject=run)
    face = event(
        id=f"{run}-face", source="/models/x", type="com.example.face.v1",
        causationid=f"{run}-frame", correlationid=run, modelname=run, modelversion="1",
        data={"score": 0.9},
    )  # fmt: skip
    last = ""
    for body in (frame, face):
        answered = await admin.post("/events", content=dumps(body), headers=STRUCTURED)
        assert answered.status_code == 201
        last = answered.headers["Causeway-Position"]
        assert int(last) == answered.json()["events"][0]["position"]
    return last


async def read_everything(client: httpx2.AsyncClient, run: str, token: str) -> list[Any]:
    """What a reader sees of the run, through every read, each naming ``token``."""
    answers = [
        await client.get(f"/events/{run}-face", headers=at(token)),
        await client.get(f"/streams/{run}", params={"min_position": token}),
        await client.get("/replay", params={"correlationid": run}, headers=at(token)),
        await client.get(f"/models/{run}", headers=at(token)),
        await client.post("/graphql", json={"query": AUDIT % f"{run}-face"}, headers=at(token)),
    ]
    assert [a.status_code for a in answers] == [200] * len(answers), [a.text for a in answers]
    return [a.text for a in answers]


def replica_queries(pair: Pair) -> list[tuple[str, str]]:
    return [
        (str(name), str(query))
        for name, query in pair.replica.execute(
            "SELECT application_name, query FROM pg_stat_activity "
            "WHERE datname = 'causeway' AND pid <> pg_backend_pid()"
        )
    ]


async def test_reads_run_on_the_replica_and_answer_as_the_primary_does(pair: Pair) -> None:
    run = f"run-{token_hex(3)}"
    primary, replica = pair.primary.url(), pair.replica.url()
    async with (
        running(primary, read_database_url=replica) as on_replica,
        running(primary) as on_primary,
    ):
        async with await admin_of(on_replica, primary) as writer:
            token = await write_a_run(writer, run)
            from_replica = await read_everything(writer, run, token)
            metrics = (await writer.get("/metrics")).text
        queries = replica_queries(pair)  # the replica app's connections, still open
        async with await admin_of(on_primary, primary) as reader:
            assert await read_everything(reader, run, token) == from_replica
    assert any("FROM events" in q for _, q in queries), queries  # REST's reads of the log
    assert any(name == "causeway walks" for name, _ in queries), queries  # GraphQL's audit
    name = f'replica="127.0.0.1:{pair.replica.port}/causeway"'
    assert f"causeway_read_replica_up{{{name}}} 1.0" in metrics
    assert f"causeway_read_replica_lag_positions{{{name}}}" in metrics
    assert f"causeway_read_replica_lag_seconds{{{name}}}" in metrics


async def test_a_model_read_back_with_the_token_is_there_100_times_in_a_row(pair: Pair) -> None:
    async with (
        running(pair.primary.url(), read_database_url=pair.replica.url()) as app,
        await admin_of(app, pair.primary.url()) as admin,
    ):
        for n in range(100):
            name = f"m-{token_hex(3)}-{n}"
            registered = await admin.post(
                f"/models/{name}/versions", content=registration("1"), headers=JSON
            )
            token = registered.headers["Causeway-Position"]
            read = await admin.get(f"/models/{name}", headers=at(token))
            assert read.status_code == 200, (n, read.text)
            assert read.json()["versions"][0]["position"] == int(token)


async def test_against_a_lagging_replica_a_read_waits_then_answers_from_the_primary(
    pair: Pair,
) -> None:
    run = f"lag-{token_hex(3)}"
    pair.replica.execute("SELECT pg_wal_replay_pause()")
    try:
        deadline = time.monotonic() + 10
        while pair.replica.execute("SELECT pg_get_wal_replay_pause_state()") != [("paused",)]:
            assert time.monotonic() < deadline, "replay did not pause"
            time.sleep(0.01)
        settings = {"read_database_url": pair.replica.url(), "read_wait_ms": 500}
        async with (
            running(pair.primary.url(), **settings) as app,
            await admin_of(app, pair.primary.url()) as admin,
        ):
            token = await write_a_run(admin, run)
            stale = await admin.get(f"/events/{run}-face")  # no token: the replica's view
            assert stale.status_code == 404
            started = time.monotonic()
            answers = await read_everything(admin, run, token)
            waited = time.monotonic() - started
            await app.state.read_router.check()
            metrics = (await admin.get("/metrics")).text
        assert orjson.loads(answers[0])["id"] == f"{run}-face"
        assert waited >= 5 * 0.5  # each of the five reads waited for the replica, in vain
        [lag] = [
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("causeway_read_replica_lag_positions{")
        ]
        assert lag >= 3  # the run's three writes, at least
    finally:
        pair.replica.execute("SELECT pg_wal_replay_resume()")


async def test_with_the_replica_stopped_reads_keep_answering(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    run = f"stop-{token_hex(3)}"
    async with (
        running(pair.primary.url(), read_database_url=pair.replica.url()) as app,
        await admin_of(app, pair.primary.url()) as admin,
    ):
        token = await write_a_run(admin, run)
        before = await read_everything(admin, run, token)
        pair.replica.stop()
        try:
            with caplog.at_level(logging.INFO, logger="app.web.reads"):
                # GraphQL first: its walk finds the replica's connections broken, and
                # walks again on the primary.
                audit = {"query": AUDIT % f"{run}-face"}
                assert (await admin.post("/graphql", json=audit)).text == before[-1]
                for _ in range(3):
                    assert await read_everything(admin, run, "0") == before
                await app.state.read_router.check()
                metrics = (await admin.get("/metrics")).text
        finally:
            pair.replica.start()
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 1, skipped  # logged once per change, not once per read
    name = f'replica="127.0.0.1:{pair.replica.port}/causeway"'
    assert f"causeway_read_replica_up{{{name}}} 0.0" in metrics


def _tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _signal_replica(pair: Pair, sig: signal.Signals) -> None:
    postmaster = int((pair.replica.folder / "postmaster.pid").read_text().split()[0])
    for pid in _tree(postmaster):
        with suppress(ProcessLookupError):
            os.kill(pid, sig)


async def test_reads_keep_answering_when_the_replica_stops_answering(pair: Pair) -> None:
    """A replica whose host froze (or a partition that drops its packets) never refuses a
    connection: reads on it hung, and the watcher, waiting on it, never marked it down."""
    run = f"frozen-{token_hex(3)}"
    primary = pair.primary.url()
    async with (
        running(primary, read_database_url=pair.replica.url(), read_wait_ms=500) as app,
        await admin_of(app, primary) as admin,
    ):
        token = await write_a_run(admin, run)
        assert (await admin.get(f"/events/{run}-face", headers=at(token))).status_code == 200
        _signal_replica(pair, signal.SIGSTOP)
        try:
            await asyncio.sleep(3)  # the watcher's rounds (every second) had their chance
            answers = {}
            for name, path, headers in (
                ("no token", f"/events/{run}-face", {}),
                ("token", f"/events/{run}-face", at(token)),
                ("models", f"/models/{run}", {}),
            ):
                try:
                    answer = await asyncio.wait_for(admin.get(path, headers=headers), 20)
                    answers[name] = answer.status_code
                except TimeoutError:
                    answers[name] = 0  # no answer in 20 s
            usable = app.state.read_router.replicas[0].is_usable
        finally:
            _signal_replica(pair, signal.SIGCONT)
    assert answers == {"no token": 200, "token": 200, "models": 200}
    assert not usable


@pytest.fixture
def another_store(server: URL, template_db: str) -> Iterator[URL]:
    name = f"causeway_other_{token_hex(4)}"
    with janitor(server, name, template_dbname=template_db):
        yield server.set(database=name)


async def test_a_read_database_that_is_no_copy_of_the_primary_is_not_used(
    database_url: URL, another_store: URL
) -> None:
    """A read URL pointed at another database (another cluster, a standby promoted and
    written since): its head, ahead of a fresh write's position, vouched for a read naming
    that position, and the event was a 404 there."""
    async with running(another_store) as other, await admin_of(other, another_store) as admin:
        for _ in range(5):
            posted = await admin.post("/events", content=dumps(event()), headers=STRUCTURED)
            assert posted.status_code == 201, posted.text
    read_url = another_store.render_as_string(hide_password=False)
    async with (
        running(database_url, read_database_url=read_url) as app,
        await admin_of(app, database_url) as admin,
    ):
        sent = event()
        posted = await admin.post("/events", content=dumps(sent), headers=STRUCTURED)
        token = {"Causeway-Min-Position": posted.headers["Causeway-Position"]}
        await app.state.read_router.check()
        read = await admin.get(f"/events/{sent['id']}", headers=token)
        [replica] = app.state.read_router.replicas
    assert read.status_code == 200, read.text
    assert (replica.is_usable, replica.why) == (
        False,
        "not a copy of the primary (its event at position 5 is not ours)",
    )


class FailingOnce:
    """The primary's connections, the ``fail_at``-th of which cannot be had (the primary
    restarting, a connection it dropped, at that moment); the database stays real."""

    def __init__(self, inner: Connector, fail_at: int) -> None:
        self.inner, self._calls, self._fail_at = inner, 0, fail_at

    def connect(self) -> AbstractAsyncContextManager[AsyncConnection]:
        self._calls += 1
        return _Refused() if self._calls == self._fail_at else self.inner.connect()


class _Refused:
    async def __aenter__(self) -> AsyncConnection:
        raise OperationalError("SELECT", {}, Exception("server closed the connection"))

    async def __aexit__(self, *exc: object) -> None:
        return None


# The watcher's lag lookup on the primary was unguarded: one failure ended the watcher for
# the life of the process, and a replica left far behind kept serving reads.
async def test_a_lagging_replica_is_skipped_after_one_failed_lookup(pair: Pair) -> None:
    primary = pair.primary.url()
    async with running(primary, read_database_url=pair.replica.url(), read_max_lag_s=1) as app:
        router: ReadRouter = app.state.read_router
        [replica] = router.replicas
        assert replica.is_usable
        async with await admin_of(app, primary) as admin:
            pair.replica.execute("SELECT pg_wal_replay_pause()")
            try:
                late = event()
                posted = await admin.post("/events", content=dumps(late), headers=STRUCTURED)
                assert posted.status_code == 201
                # The next round reads the head, then fails to look up the lag.
                flaky = FailingOnce(router.primary.rest, fail_at=2)
                router.primary.rest = flaky
                await asyncio.sleep(4)  # the watcher checks every second
                skipped = not replica.is_usable
                read = await admin.get(f"/events/{late['id']}")
            finally:
                pair.replica.execute("SELECT pg_wal_replay_resume()")
                router.primary.rest = flaky.inner
    assert skipped
    assert read.status_code == 200  # read on the primary, not the replica behind


class TestOnThePrimaryAlone:
    async def test_a_model_read_back_with_the_token_is_there_each_time(
        self, database_url: URL
    ) -> None:
        async with running(database_url) as app, await admin_of(app, database_url) as admin:
            for n in range(20):  # 100 on the replica above; each waits for the runner
                registered = await admin.post(
                    f"/models/m{n}/versions", content=registration("1"), headers=JSON
                )
                token = registered.headers["Causeway-Position"]
                read = await admin.get(f"/models/m{n}", params={"min_position": token})
                assert read.status_code == 200, (n, read.text)

    async def test_a_read_model_that_does_not_get_there_in_time_answers_503(
        self, database_url: URL
    ) -> None:
        async with (
            running(database_url, run_projections=False, read_wait_ms=50) as app,
            await admin_of(app, database_url) as admin,
        ):
            registered = await admin.post(
                "/models/late/versions", content=registration("1"), headers=JSON
            )
            token = registered.headers["Causeway-Position"]
            read = await admin.get("/models/late", headers=at(token))
            bad = await admin.get("/models/late", headers=at("x"))
            query = {"query": '{ model(name: "late") { name } }'}
            graphql = await admin.post(f"/graphql?min_position={token}", json=query)
        assert read.status_code == 503
        assert read.headers["Retry-After"] == "1"
        assert read.json()["projection"] == "model-registry"
        assert bad.status_code == 422
        [error] = graphql.json()["errors"]
        assert error["extensions"]["code"] == "UNAVAILABLE"

    async def test_a_task_routed_from_an_event_shows_with_the_events_token(
        self, database_url: URL
    ) -> None:
        route = {"id": "detect", "types": ["com.example.frame.*"], "kind": "k", "queue": "gpu"}
        async with running(database_url) as app, await admin_of(app, database_url) as admin:
            for n in range(5):
                defined = await admin.post("/routes", json={**route, "queue": f"q{n}"})
                routes = await admin.get(
                    "/routes", headers=at(defined.headers["Causeway-Position"])
                )
                assert [r["queue"] for r in routes.json()["routes"]] == [f"q{n}"]
                posted = await admin.post("/events", content=dumps(event()), headers=STRUCTURED)
                token = posted.headers["Causeway-Position"]
                queues = await admin.get("/queues", params={"min_position": token})
                assert {q["queue"]: q["ready"] for q in queues.json()["queues"]}[f"q{n}"] == 1

    # A token from another deployment, or from before a failover, may be past the head:
    # a log read answered at once from before it (a 404 for an event it may yet hold).
    async def test_a_log_read_naming_a_position_past_the_head_answers_503(
        self, database_url: URL
    ) -> None:
        async with (
            running(database_url, read_wait_ms=300) as app,
            await admin_of(app, database_url) as admin,
        ):
            posted = await admin.post("/events", content=dumps(event()), headers=STRUCTURED)
            future = str(int(posted.headers["Causeway-Position"]) + 1000)
            read = await admin.get("/events/not-yet", headers=at(future))
            reached = await admin.get(
                "/events/not-yet", headers=at(posted.headers["Causeway-Position"])
            )
        assert read.status_code == 503, read.text
        assert read.headers["Retry-After"] == "1"
        assert read.json()["min_position"] == int(future)
        assert reached.status_code == 404
