"""An ASGI app that reads each request and answers it without doing anything else: a
201 with a one-event JSON body to a POST, a 200 to anything else. Served by uvicorn as
``causeway serve`` is, it is the most any Python service can answer under
``bench/ingest.py``'s single-event load on this machine: the ceiling of figure (b)."""

from __future__ import annotations

from starlette.types import Receive, Scope, Send

_ANSWER = b'{"events":[{"id":"x","source":"/s","stream":"s","stream_version":1,"position":1,"duplicate":false}]}'
_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(_ANSWER)).encode())]


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    status = 201 if scope["method"] == "POST" else 200
    await send({"type": "http.response.start", "status": status, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": _ANSWER})
