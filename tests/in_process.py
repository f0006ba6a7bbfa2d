"""An ASGI app under uvicorn in the test's own process, with ``causeway serve``'s connection
protocol: for tests that need a real socket and still reach into the app or the protocol."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

from app.api.wire import CappedHttpToolsProtocol


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[int]:
    """``app`` served on 127.0.0.1 until the block ends; yields its port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, http=CappedHttpToolsProtocol, log_level="error"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        yield port
    finally:
        server.should_exit = True
        await task
