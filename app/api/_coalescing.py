"""The transport ``app.api.wire`` gives uvicorn's protocol for a connection."""

from __future__ import annotations

import asyncio
from typing import Any

_HOLD_BYTES = 4096  # an answer's head; a larger write is a body, and goes at once


class Coalescing(asyncio.Transport):
    """A connection's transport that sends an answer's head and body in one write.

    uvicorn writes the status line and headers, then the body: two sends, two TCP
    segments, and a client woken twice, for every answer. Here a small write waits until
    the next write, which goes out with it at once, or until the end of the loop's turn
    (a streamed answer's head before its first chunk is sent then). Everything else is
    the socket's transport."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held = b""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held:
            data, self._held = self._held + data, b""
        elif len(data) <= _HOLD_BYTES and not self._transport.is_closing():
            self._held = bytes(data)
            self._loop.call_soon(self._flush)
            return
        self._transport.write(data)

    def write_whole(self, data: bytes) -> None:
        """A whole answer: it goes at once, after anything held."""
        if self._held:
            data, self._held = self._held + data, b""
        self._transport.write(data)

    def _flush(self) -> None:
        held, self._held = self._held, b""
        if held and not self._transport.is_closing():  # else the client is gone
            self._transport.write(held)

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = b""
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return len(self._held) + self._transport.get_write_buffer_size()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()
