"""The HTTP/1.1 connections ``causeway serve`` accepts: uvicorn's httptools protocol, with
a cap on the request head and its own refusals as problems.

httptools reads a request line and headers of any size: uvicorn appends each piece of
the URL to the last (``bytes +=``, quadratic) and keeps every header, so one client
sending a URL or headers without end held a growing share of the server's memory and of
its only event loop. Past ``MAX_HEAD_BYTES`` the request is refused with a 431 problem
and the connection closed, before the app sees it. What httptools cannot parse at all
is a 400 problem rather than uvicorn's plain text. Bodies are capped where they are read
(``ingest.bodies``).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.api.problems import MEDIA_TYPE
from app.errors import AppError, BadRequest, HeadTooLarge

MAX_HEAD_BYTES = 64 * 1024  # the request line and headers; nginx allows 32 KiB by default


class _HeadOverCap(Exception):
    """Raised from a parser callback: httptools stops, and uvicorn answers through
    ``send_400_response``."""


class CappedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0
        self._over_cap = False

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value))
        super().on_header(name, value)

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD_BYTES:
            self._over_cap = True
            raise _HeadOverCap

    def send_400_response(self, msg: str) -> None:
        refusal: AppError = (
            HeadTooLarge(f"the request line and headers are over {MAX_HEAD_BYTES} bytes")
            if self._over_cap
            else BadRequest(f"the request is not HTTP/1.1 as httptools reads it: {msg}")
        )
        body = orjson.dumps(
            {
                "type": f"/problems/{refusal.code}",
                "title": refusal.title,
                "status": refusal.status,
                "detail": refusal.detail,
            }
        )
        phrase = HTTPStatus(refusal.status).phrase
        head = [f"HTTP/1.1 {refusal.status} {phrase}\r\n".encode()]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            f"content-type: {MEDIA_TYPE}\r\n".encode(),
            f"content-length: {len(body)}\r\n".encode(),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()
