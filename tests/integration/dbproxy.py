"""A TCP proxy in front of the test PostgreSQL, run in a thread of its own, that a test
can switch (a database host that goes away, or stops answering): ``forward`` (normal), ``refuse`` (new connections closed at once, existing
ones cut), ``freeze`` (connections accepted and kept open, no byte forwarded)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from sqlalchemy import URL


class DbProxy:
    """A proxy of ``server`` (a TCP address, or a Unix socket's folder as the embedded
    PostgreSQL gives it: ``?host=/tmp/...``), listening on 127.0.0.1:``port``."""

    def __init__(self, server: URL) -> None:
        folder = server.query.get("host")
        folder = folder[0] if isinstance(folder, tuple) else folder
        if server.host and server.host.startswith("/"):
            folder = server.host
        self._host = server.host or "127.0.0.1"
        self._port = server.port or 5432
        self._socket = f"{folder}/.s.PGSQL.{self._port}" if folder else None
        self.mode = "forward"
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Future[None]] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()
        for task in asyncio.all_tasks(self._loop):
            task.cancel()
        self._loop.run_until_complete(asyncio.sleep(0))

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "refuse":
            writer.transport.abort()
            return
        self._writers.add(writer)
        if self.mode == "freeze":
            return  # kept open, nothing forwarded
        try:
            if self._socket is not None:
                up_reader, up_writer = await asyncio.open_unix_connection(self._socket)
            else:
                up_reader, up_writer = await asyncio.open_connection(self._host, self._port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.add(up_writer)

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                with contextlib.suppress(OSError):
                    while data := await r.read(65536):
                        while self.mode == "freeze":
                            await asyncio.sleep(0.05)
                        if self.mode == "refuse":
                            break
                        w.write(data)
                        await w.drain()
            finally:
                w.transport.abort()

        for task in (pipe(reader, up_writer), pipe(up_reader, writer)):
            piping = asyncio.ensure_future(task)
            self._pipes.add(piping)
            piping.add_done_callback(self._pipes.discard)

    def url(self, server: URL) -> URL:
        """``server``'s URL, through this proxy."""
        return server.set(host="127.0.0.1", port=self.port).difference_update_query(["host"])

    def _call(self, fn: Any) -> None:
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()

        self._loop.call_soon_threadsafe(run)
        done.wait(10)

    def set(self, mode: str) -> None:
        def apply() -> None:
            self.mode = mode
            if mode == "refuse":
                for w in list(self._writers):
                    w.transport.abort()
                self._writers.clear()

        self._call(apply)

    def close(self) -> None:
        self.set("refuse")
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
