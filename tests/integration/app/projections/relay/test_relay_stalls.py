"""The relay when NATS hangs, then dies, while a batch larger than CAUSEWAY_NATS_MAX_PENDING
is being published (the defaults: batches of 10,000 events, 4,000 acks awaited at once):
the acks awaited never come, and nats-py waited for a free slot without a time limit, so
the relay never sent again; and a service stopping then did not stop (nats-py names a
cancelled wait for a slot as a NATS error, after which the relay began its next session)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time

import httpx2
from sqlalchemy import URL

from app.main import create_app, dispose
from app.projections.checkpoints import read_head
from app.projections.relay.log import fetch_relay_status
from app.projections.relay.subjects import Tenants
from app.settings import Settings
from tests.integration.app.projections.relay.jetstream import wait_relayed
from tests.integration.app.projections.relay.test_relay_chaos import Relay
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import BATCH, dumps, event
from tests.integration.nats import Nats, nats_servers, needs_nats
from tests.integration.process import create_key, environment, free_port

pytestmark = needs_nats


def _stalling(database_url: URL, server: Nats) -> dict[str, str]:
    """A relay that gives up on an ack after 1 s, with 5 awaited at most."""
    return environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_NATS_URL=server.url,
        CAUSEWAY_NATS_ACK_TIMEOUT_S="1",
        CAUSEWAY_NATS_DUPLICATE_WINDOW_S="10",
        CAUSEWAY_NATS_MAX_PENDING="5",
        CAUSEWAY_PROJECTION_POLL_INTERVAL_S="0.2",
    )


async def _stall(server: Nats, client: httpx2.AsyncClient) -> None:
    """NATS hangs while 50 events wait to be relayed, then dies and comes back."""
    server.pause()  # SIGSTOP
    try:
        batch = dumps([event() for _ in range(50)])
        assert (await client.post("/events", content=batch, headers=BATCH)).is_success
        await asyncio.sleep(2)  # the relay read the batch and sent the 5 it may
    finally:
        server.kill(0)  # what the hung server had not read is lost
    server.start(0)


async def test_the_relay_catches_up_after_nats_dies_mid_batch(
    database_url: URL, make_key: MakeKey
) -> None:
    """docs/relay.md: an ack missing past CAUSEWAY_NATS_ACK_TIMEOUT_S ends the session; when
    NATS is back the relay catches up."""
    key = await make_key("acme")
    app = create_app(Settings(_env_file=None), database_url=database_url)  # appends only
    with nats_servers(1) as server:
        env = _stalling(database_url, server)
        relay = Relay(env)
        relay.start()
        try:
            async with asgi_client(app, key) as acme:
                sent = await acme.post("/events", content=dumps([event()]), headers=BATCH)
                assert sent.is_success
                await wait_relayed(app.state.engine, "CAUSEWAY", timeout_s=30)
                await _stall(server, acme)
                deadline = time.monotonic() + 30
                while True:
                    async with app.state.engine.connect() as conn:
                        status = await fetch_relay_status(conn, "CAUSEWAY", Tenants())
                        head = await read_head(conn)
                    if status.checkpoint >= head or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.2)
        finally:
            output = relay.output()
            relay.stop()
    await dispose(app)
    assert status.checkpoint == head, (status, output)


def test_serve_stops_on_sigterm_while_its_relay_waits_for_acks(database_url: URL) -> None:
    """``serve``'s lifespan stops the relay by cancelling it, here while it waits for a slot
    to publish."""
    with nats_servers(1) as server:
        env = _stalling(database_url, server)
        key = create_key(env, "acme", "ingest,read")
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        auth = {"Authorization": f"Bearer {key}", **BATCH}
        try:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx2.TransportError):
                    if httpx2.get(f"{base}/healthz", timeout=1).status_code == 200:
                        break
                assert process.poll() is None
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert httpx2.post(f"{base}/events", content=dumps([event()]), headers=auth).is_success
            while httpx2.get(f"{base}/projections", headers=auth).json()["relay"]["lag_events"]:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            server.pause()  # SIGSTOP
            try:
                posted = httpx2.post(
                    f"{base}/events", content=dumps([event() for _ in range(50)]), headers=auth
                )
                assert posted.is_success
                time.sleep(2)  # the relay read the batch and sent the 5 it may
            finally:
                server.kill(0)
            server.start(0)
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
                stopped = True
            except subprocess.TimeoutExpired:
                stopped = False
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert stopped, "causeway serve did not stop within 20 s of SIGTERM"
