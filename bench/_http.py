"""A bare HTTP/1.1 keep-alive client on asyncio's protocol layer, so that the load
generator costs far less CPU than the server it measures: on a two-core machine whatever
the generator uses, the server and PostgreSQL do not get. A full client library was the
bottleneck there; streams (``asyncio.open_connection``) cost a third more than this.
The load runs on uvloop (``run``), as the server does."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar
from urllib.parse import urlsplit

import uvloop

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop: the event loop the load generator runs on."""
    return uvloop.run(main)


class _Answers(asyncio.Protocol):
    """Reads one response after another: the status line, Content-Length, the body."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._waiting: asyncio.Future[tuple[int, bytes]] | None = None
        self._lost: BaseException | None = None

    def expect(self) -> asyncio.Future[tuple[int, bytes]]:
        self._waiting = asyncio.get_running_loop().create_future()
        if self._lost is not None:
            self._waiting.set_exception(self._lost)
        else:
            self._answer()  # it may have arrived already
        return self._waiting

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._answer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = exc or ConnectionError("the server closed the connection")
        if self._waiting is not None and not self._waiting.done():
            self._waiting.set_exception(self._lost)

    def _answer(self) -> None:
        if self._waiting is None or self._waiting.done():
            return
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self._buffer[:end]).split(b"\r\n")
        length = 0
        for line in head[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(self._buffer) < end + 4 + length:
            return
        body = bytes(self._buffer[end + 4 : end + 4 + length])
        del self._buffer[: end + 4 + length]
        self._waiting.set_result((int(head[0].split(b" ", 2)[1]), body))


class Connection:
    def __init__(self, transport: asyncio.Transport, answers: _Answers) -> None:
        self._transport = transport
        self._answers = answers

    @classmethod
    async def open(cls, base_url: str) -> Connection:
        parts = urlsplit(base_url)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"{base_url!r} names no host and port")
        loop = asyncio.get_running_loop()
        transport, answers = await loop.create_connection(_Answers, parts.hostname, parts.port)
        return cls(transport, answers)

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self._transport.write(
            f"POST {path} HTTP/1.1\r\nHost: bench\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        return await self._answers.expect()

    async def close(self) -> None:
        self._transport.close()
