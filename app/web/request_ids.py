"""The request id: every HTTP answer says ``X-Request-Id``, and every line logged while
the request is answered carries it (``app.telemetry.logs``).

A client's own id is echoed when it is sane (1 to 128 letters, digits and ``._:/+=@~-``;
the first ``X-Request-Id`` header counts), so a caller can find its request in our logs
by the id it logged itself; otherwise the service makes one (32 hex digits). The header
is added to the answer's head as it is sent, under the app and the time limits, so that
every answer has it: the fast ``POST /events``, problems, a 413 refused before the body,
a 408 when the body stopped arriving.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.telemetry import logs

_HEADER = b"x-request-id"


async def with_request_id(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer an HTTP request with ``app``, under its request id."""
    sent = None
    for name, value in scope["headers"]:
        if name == _HEADER:
            sent = value
            break
    rid = logs.request_id_for(sent)
    header = (_HEADER, rid.encode("ascii"))

    async def send_with_id(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), header]}
        await send(message)

    # Reset after: an app called in its caller's task (a test's ASGI client) leaves
    # nothing of this request behind. (uvicorn answers each request in a task of its own.)
    token, tenant_token = logs.request_id.set(rid), logs.tenant.set(None)
    try:
        await app(scope, receive, send_with_id)
    finally:
        logs.tenant.reset(tenant_token)
        logs.request_id.reset(token)
