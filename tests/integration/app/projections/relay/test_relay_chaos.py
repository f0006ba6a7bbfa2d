"""The relay against a three-node JetStream cluster, with a stream of three replicas,
while writers append concurrently, one NATS node is killed (SIGKILL) and restarted, and
the relay process is killed (SIGKILL) and restarted twice: at the end the stream holds
every event exactly once, in position order, and a durable consumer received the log.

The issue's run is 20,000 events: ``make relay-chaos`` (or
``CAUSEWAY_TEST_RELAY_EVENTS=20000``); the suite runs 3,000 to keep CI short.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import nats
import orjson
from sqlalchemy import URL, select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.tables import events
from app.main import create_app, dispose
from app.projections.relay.log import fetch_relay_status
from app.projections.relay.subjects import Tenants
from app.settings import Settings
from tests.integration.app.projections.relay.jetstream import consume, wait_relayed
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import BATCH, dumps, event
from tests.integration.nats import Nats, nats_servers, needs_nats
from tests.integration.process import environment

pytestmark = needs_nats
EVENTS = int(os.environ.get("CAUSEWAY_TEST_RELAY_EVENTS", "3000"))
WRITERS = 6
BATCH_SIZE = 20
# The writers spread their appends over this long, so the kills land mid-stream.
SECONDS = max(12.0, EVENTS / 1000)


class Relay:
    """``causeway relay nats`` as a process of its own, to be killed and started again."""

    def __init__(self, env: dict[str, str]) -> None:
        self._env = env
        self._log = tempfile.NamedTemporaryFile(prefix="causeway-relay-", suffix=".log")  # noqa: SIM115 - closed in stop
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "relay", "nats"],
            env=self._env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def output(self) -> str:
        self._log.flush()
        with open(self._log.name, encoding="utf-8", errors="replace") as f:
            return f.read()[-4000:]

    def stop(self) -> None:
        self.kill()
        self._log.close()


@contextmanager
def relay_process(database_url: URL, cluster: Nats) -> Iterator[Relay]:
    env = environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_NATS_URL=cluster.url,
        CAUSEWAY_NATS_REPLICAS="3",
        CAUSEWAY_NATS_ACK_TIMEOUT_S="2",
        CAUSEWAY_NATS_DUPLICATE_WINDOW_S="60",
        CAUSEWAY_PROJECTION_POLL_INTERVAL_S="0.2",
    )
    relay = Relay(env)
    relay.start()
    try:
        yield relay
    finally:
        relay.stop()


async def relayed_some(engine: AsyncEngine) -> None:
    """Until the relay has started and moved its checkpoint."""
    async with asyncio.timeout(60):
        while True:
            async with engine.connect() as conn:
                if (await fetch_relay_status(conn, "CAUSEWAY", Tenants())).checkpoint > 0:
                    return
            await asyncio.sleep(0.1)


async def stream_leader(cluster: Nats) -> int:
    nc = await nats.connect(servers=cluster.url.split(","))
    try:
        info = await nc.jetstream().stream_info("CAUSEWAY")
        leader = info.cluster.leader if info.cluster else None
        return next(i for i, n in enumerate(cluster.nodes) if n.name == leader)
    finally:
        await nc.close()


async def test_every_event_once_and_in_order_through_node_and_relay_kills(
    database_url: URL, make_key: MakeKey, engine: AsyncEngine
) -> None:
    app = create_app(Settings(_env_file=None), database_url=database_url)
    keys = [await make_key(tenant, "ingest,read") for tenant in ("acme", "globex")]
    appended = 0
    milestones = {
        EVENTS // 5: asyncio.Event(),
        2 * EVENTS // 5: asyncio.Event(),
        3 * EVENTS // 5: asyncio.Event(),
    }

    async def write(key: str, batches: int) -> None:
        nonlocal appended
        async with asgi_client(app, key) as client:
            for _ in range(batches):
                batch = [event() for _ in range(BATCH_SIZE)]
                answer = await client.post("/events", content=dumps(batch), headers=BATCH)
                assert answer.is_success, answer.text
                appended += BATCH_SIZE
                for at, reached in milestones.items():
                    if appended >= at:
                        reached.set()
                await asyncio.sleep(WRITERS * BATCH_SIZE * SECONDS / EVENTS)

    async def reached(milestone: asyncio.Event) -> None:
        """The writers got that far; a writer that failed fails the test, never hangs it."""
        waiting = asyncio.ensure_future(milestone.wait())
        await asyncio.wait([waiting, *writers], timeout=180, return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done():
            waiting.cancel()
            for writer in writers:
                if writer.done():
                    writer.result()  # its error
            raise AssertionError("the writers did not reach a milestone in 180 s")

    writers: list[asyncio.Task[None]] = []
    with nats_servers(3) as cluster, relay_process(database_url, cluster) as relay:
        try:
            per_writer = EVENTS // BATCH_SIZE // WRITERS
            writers += [asyncio.create_task(write(keys[i % 2], per_writer)) for i in range(WRITERS)]
            await reached(milestones[EVENTS // 5])
            await relayed_some(engine)
            relay.kill()  # SIGKILL, mid-stream
            await asyncio.sleep(0.5)
            relay.start()
            await reached(milestones[2 * EVENTS // 5])
            victim = await stream_leader(cluster)
            cluster.kill(victim)  # SIGKILL the stream's leader
            await asyncio.sleep(3)
            await asyncio.to_thread(cluster.start, victim)
            await reached(milestones[3 * EVENTS // 5])
            relay.kill()
            await asyncio.sleep(0.5)
            relay.start()
            await asyncio.gather(*writers)
            await wait_relayed(engine, "CAUSEWAY", timeout_s=120)
            total = per_writer * WRITERS * BATCH_SIZE
            got = await consume(cluster.url, "CAUSEWAY", "audit", total, timeout_s=120)
        except BaseException:
            print(relay.output())  # noqa: T201 - the relay's log, on failure
            raise
        finally:
            await dispose(app)
    async with engine.connect() as conn:
        log = [
            (r.tenant, r.position)
            for r in await conn.execute(
                select(events.c.tenant, events.c.position).order_by(events.c.position)
            )
        ]
    assert len(log) == total
    received = [(orjson.loads(m.data)["position"], m.headers["Nats-Msg-Id"]) for m in got]
    ids = [message_id for _, message_id in received]
    assert len(ids) == len(set(ids)), "a message was stored twice"
    # The stream's order is the log's order (so each tenant's is too), and nothing is
    # missing: the consumer received the log, exactly.
    assert [m.seq for m in got] == sorted(m.seq for m in got)
    assert [f"{tenant}:{position}" for tenant, position in log] == ids
    assert [position for position, _ in received] == [position for _, position in log]
