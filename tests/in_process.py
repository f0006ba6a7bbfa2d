"""An ASGI app under Granian in the test's own process, as ``causeway serve`` runs it
(HTTP/1.1, no WebSocket): for tests that need a real socket and still reach into the app."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import httpx2
from granian.constants import HTTPModes, Interfaces
from granian.log import LogLevels
from granian.server.embed import Server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def serving(
    app: Any, *, lifespan: Literal["on", "off"] = "on", **options: Any
) -> AsyncIterator[int]:
    """``app`` served on 127.0.0.1 until the block ends; yields its port. ``lifespan="off"``:
    the app's startup and shutdown are the test's (as with an ASGI client). ``options``
    go to Granian's embedded ``Server``."""
    port = _free_port()
    server = Server(
        app,
        address="127.0.0.1",
        port=port,
        interface=Interfaces.ASGINL if lifespan == "off" else Interfaces.ASGI,
        http=HTTPModes.http1,
        websockets=False,
        log_level=LogLevels.error,
        **options,
    )
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(30), httpx2.AsyncClient() as probe:
            while True:
                if task.done():
                    task.result()  # what stopped it
                    raise RuntimeError("granian stopped before it started")
                try:
                    await probe.get(f"http://127.0.0.1:{port}/healthz")
                    break
                except httpx2.TransportError:
                    await asyncio.sleep(0.05)
        yield port
    finally:
        server.stop()  # type: ignore[no-untyped-call]  # granian leaves it unannotated
        await task
