"""A reader that keeps reading, only slowly, is served to the end (``app.web.timeouts``:
the send timeout runs per write, not over the whole answer). A replay's parts are a fetch
(about 8 MB) or a Parquet row group (up to 64 MB); sent whole, the server held the send()
of the next until the client had taken most of one, and the send timeout timed that: a
reader slower than a part per ``send_timeout_s`` (some 140 KB/s by default) was cut off.

Scaled down here: a 2 s send timeout, and a reader that reads every 0.1 s (up to 64 KB,
its receive buffer; some 0.6 MB/s), every setting but that at its default. Events of 8 KB
make fetches of 1,000 events (8 MB) after the first 100."""

from __future__ import annotations

import asyncio
import secrets
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from fastapi import FastAPI

from app.main import create_app, dispose
from app.settings import Settings
from tests.in_process import serving
from tests.integration.conftest import MakeKey
from tests.integration.events import BATCH, dumps, event

EVENTS = 1300  # some 11 MB


@pytest.fixture
async def live(database_url: Any, make_key: MakeKey) -> AsyncIterator[tuple[FastAPI, int, str]]:
    settings = Settings(
        _env_file=None,
        run_projections=False,
        run_scheduler=False,
        send_timeout_s=2.0,
    )
    app = create_app(settings, database_url=database_url)
    key = await make_key("acme", "ingest,read")
    async with (
        serving(app) as port,
        httpx2.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}
        ) as client,
    ):
        for start in range(0, EVENTS, 100):
            # 8 KB each, incompressible (a Parquet row group stays large)
            pads = [secrets.token_urlsafe(6000) for _ in range(100)]
            batch = [event(data={"pad": pad, "n": start + i}) for i, pad in enumerate(pads)]
            sent = await client.post("/events", content=dumps(batch), headers=BATCH)
            assert sent.status_code == 201, sent.text
        yield app, port, key
    await dispose(app)


@pytest.mark.parametrize("form", ["ndjson", "parquet"])
async def test_a_slow_reader_that_never_stops_reading_gets_the_whole_replay(
    live: tuple[FastAPI, int, str], form: str
) -> None:
    _, port, key = live
    loop = asyncio.get_running_loop()
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    reader.setblocking(False)
    await loop.sock_connect(reader, ("127.0.0.1", port))
    reader.sendall(
        f"GET /replay?format={form} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\r\n".encode()
    )
    received = bytearray()
    longest_pause = 0.0
    with reader:
        async with asyncio.timeout(60):
            while True:
                data = await loop.sock_recv(reader, 1 << 17)
                if not data:
                    break  # the server closed the connection
                received += data
                if received.endswith(b"\r\n0\r\n\r\n"):
                    break  # the chunked answer's last chunk: complete
                read_at = time.monotonic()
                await asyncio.sleep(0.1)  # a reader that works on what it got, then reads on
                # Its own pause between two reads (not the wait for the server to have more,
                # which a loaded machine stretches: the send timeout is about the former).
                longest_pause = max(longest_pause, time.monotonic() - read_at)
    lines = _body(received).count(b'"pad"') if form == "ndjson" else EVENTS
    assert longest_pause < 1.5  # never near the 2 s send timeout between two reads
    assert received.endswith(b"\r\n0\r\n\r\n"), f"cut short after {lines} of {EVENTS} events"
    assert lines == EVENTS


def _body(answer: bytearray) -> bytes:
    """The body of a chunked answer: its pieces are cut anywhere, a line too."""
    _, _, rest = bytes(answer).partition(b"\r\n\r\n")
    body, at = bytearray(), 0
    while True:
        end = rest.index(b"\r\n", at)
        size = int(rest[at:end], 16)
        if size == 0:
            return bytes(body)
        body += rest[end + 2 : end + 2 + size]
        at = end + 2 + size + 2
