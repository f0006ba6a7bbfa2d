"""Driving an ASGI app by hand, for what an HTTP client cannot send: a body cut short, a
websocket handshake."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, MutableMapping, Sequence
from typing import Any

App = Callable[..., Coroutine[Any, Any, None]]
Message = MutableMapping[str, Any]


def scope(kind: str, path: str, headers: list[tuple[bytes, bytes]], **more: Any) -> dict[str, Any]:
    """An ASGI connection scope of ``kind`` ("http", "websocket") for ``path``."""
    return {
        "type": kind,
        "asgi": {"version": "3.0"},
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("causeway", 80),
        **more,
    }


async def call(
    app: App, connection: dict[str, Any], messages: Sequence[Message], *, then: Message
) -> list[Message]:
    """Run ``app`` on ``connection``: it receives ``messages``, then ``then`` for ever.
    What it sent, in order."""
    pending = list(messages)
    sent: list[Message] = []

    async def receive() -> Message:
        return pending.pop(0) if pending else then

    async def send(message: Message) -> None:
        sent.append(message)

    await app(connection, receive, send)
    return sent
