"""A replica's walk pool (``DriverPool`` with ``answer_s``) and the GraphQL walk's fall-back
to the primary: a connection given back whatever cuts its checkout, and a replica taken as
gone only when its connection does not answer (not when a walk runs past its budget, nor
when its walks are all busy). The replica here is the test database itself (the same log:
the watcher takes it for a copy)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from sqlalchemy import URL

from app.db.engine import DriverPool
from app.errors import Unavailable
from tests.integration.app.graphql.workflow import LINEAGE, ask
from tests.integration.app.web.test_replicas import admin_of, running
from tests.integration.events import BATCH, STRUCTURED, dumps
from tests.integration.events import event as cloudevent


async def test_a_request_cancelled_while_a_replica_walk_waits_for_its_connection_leaks_none(
    database_url: URL,
) -> None:
    """A client that leaves while a walk takes its connection from a replica's pool:
    ``within`` waited with ``asyncio.wait``, which does not cancel what it waits for, so
    the checkout went on, took the connection, and nobody gave it back; with the pool's
    connections gone, every later walk was Unavailable."""
    pool = DriverPool(
        database_url, min_size=1, max_size=1, statement_timeout_ms=1000, wait_s=1,
        name="walks", answer_s=2.0,
    )  # fmt: skip
    await pool.open()
    try:
        async with pool.connect("acme") as conn:  # warm: the pool holds its one connection
            await conn.execute("SELECT 1")

        async def walk() -> None:
            async with pool.connect("acme") as conn:
                await conn.execute("SELECT 1")
                await asyncio.sleep(10)

        task = asyncio.create_task(walk())
        await asyncio.sleep(0)  # the walk now waits in connect()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.5)  # whatever was left to finish, finished
        in_use = pool.figures()[0]
        try:
            async with pool.connect("acme") as conn:
                await conn.execute("SELECT 1")
            after = "a connection"
        except Unavailable as exc:
            after = str(exc)
    finally:
        await pool.close()
    assert (in_use, after) == (0, "a connection")


async def test_a_walk_past_its_time_budget_on_a_replica_leaves_the_replica_in_use(
    database_url: URL, caplog: pytest.LogCaptureFixture
) -> None:
    """A heavy lineage walk runs past graphql_timeout_ms on a healthy replica: the answer
    is TIMEOUT, as on the primary, and the replica stays in use (a ``Timeout`` is an
    ``Unavailable``, which was taken for a replica gone)."""
    read_url = database_url.render_as_string(hide_password=False)  # the same log: a copy
    async with running(
        database_url,
        read_database_url=read_url,
        graphql_timeout_ms=100,
        graphql_max_lineage_depth=5000,
        graphql_max_lineage_nodes=5000,
    ) as app:
        router = app.state.read_router
        async with await admin_of(app, database_url) as admin:
            chain = [cloudevent()]
            for _ in range(3999):
                chain.append(cloudevent(causationid=chain[-1]["id"]))
            sent = await admin.post("/events", content=dumps(chain), headers=BATCH)
            assert sent.status_code in (200, 201), sent.text
            await router.check()
            assert [(r.is_usable, r.why) for r in router.replicas] == [(True, "in use")]
            with caplog.at_level(logging.WARNING, logger="app.web.reads"):
                body = await ask(
                    admin, LINEAGE, id=chain[-1]["id"], dir="UPSTREAM", depth=5000, limit=5000
                )
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert body["errors"][0]["extensions"]["code"] == "TIMEOUT", body
    assert skipped == []


async def test_a_replica_whose_walks_are_all_busy_for_a_moment_is_not_marked_down(
    database_url: URL, caplog: pytest.LogCaptureFixture
) -> None:
    """A walk waits for a free connection as long as its time budget (wait_s, 5 s here);
    answer_s (2 s) bounds only the first statement on the connection it gets. Twelve
    walks busy for 3 s had a healthy replica marked down."""
    read_url = database_url.render_as_string(hide_password=False)
    async with running(database_url, read_database_url=read_url, graphql_timeout_ms=5000) as app:
        router = app.state.read_router
        [replica] = router.replicas
        async with await admin_of(app, database_url) as admin:
            sent = cloudevent()
            posted = await admin.post("/events", content=dumps(sent), headers=STRUCTURED)
            assert posted.status_code == 201, posted.text
            await router.check()
            assert replica.is_usable
            release = asyncio.Event()
            held = 0

            async def hold() -> None:
                nonlocal held
                async with replica.walks.connect("acme"):
                    held += 1
                    await release.wait()

            holders = [asyncio.create_task(hold()) for _ in range(12)]
            while held < 12:
                await asyncio.sleep(0.01)
            asyncio.get_running_loop().call_later(3.0, release.set)
            with caplog.at_level(logging.WARNING, logger="app.web.reads"):
                body = await ask(admin, LINEAGE, id=sent["id"], dir="UPSTREAM", depth=1, limit=10)
            await asyncio.gather(*holders)
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert "errors" not in body, body
    assert skipped == []
