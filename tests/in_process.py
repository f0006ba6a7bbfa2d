"""An ASGI app under uvicorn in the test's own process, as ``causeway serve`` runs it
(httptools, no WebSocket): for tests that need a real socket and still reach into the app."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from uvicorn.config import LifespanType


@asynccontextmanager
async def serving(
    app: Any, *, lifespan: LifespanType = "auto", **options: Any
) -> AsyncIterator[int]:
    """``app`` served on 127.0.0.1 until the block ends; yields its port. ``lifespan="off"``:
    the app's startup and shutdown are the test's (as with an ASGI client). ``options``
    go to ``uvicorn.Config``."""
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))  # bound here and handed over: no port to race for
    config = uvicorn.Config(
        app,
        log_level="error",
        access_log=False,  # as ``causeway serve`` runs by default (CAUSEWAY_ACCESS_LOG)
        lifespan=lifespan,
        http="httptools",
        ws="none",
        **options,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[listening]))
    try:
        async with asyncio.timeout(30):
            while not server.started:
                if task.done():
                    task.result()  # what stopped it
                    raise RuntimeError("uvicorn stopped before it started")
                await asyncio.sleep(0.01)
        yield int(listening.getsockname()[1])
    finally:
        server.should_exit = True
        await task
        listening.close()
