"""The server span of every HTTP request (``docs/observability.md``, Traces).

``Causeway.__call__`` calls ``traced`` only when ``tracing.on``: with tracing off the
request never reaches this module. The span continues the caller's W3C ``traceparent``
header, is named ``{method} {route}`` once the router has matched the route template
(the fast ``POST /events`` path names its own), and carries the stable HTTP server
attributes."""

from __future__ import annotations

from opentelemetry.trace import SpanKind, StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.telemetry import tracing
from app.web.route_templates import route_template

# Paths answered before FastAPI's router, so no route in the scope names them.


async def traced(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer the request with ``app`` inside its server span."""
    method = scope["method"]
    carrier = {}
    for name, value in scope["headers"]:
        if name in (b"traceparent", b"tracestate"):
            carrier[name.decode("latin-1")] = value.decode("latin-1")
    parent = tracing.context_of(carrier.get("traceparent"), carrier.get("tracestate"))
    attributes = {
        "http.request.method": method,
        "url.path": scope["path"],
        "url.scheme": scope.get("scheme", "http"),
        "network.protocol.name": "http",
    }
    if scope.get("query_string"):
        attributes["url.query"] = scope["query_string"].decode("latin-1")
    server = scope.get("server")
    if server and server[1] is not None:
        attributes["server.port"] = server[1]
    status = 0

    async def send_status(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    with tracing.tracer().start_as_current_span(
        method, context=parent, kind=SpanKind.SERVER, attributes=attributes
    ) as span:
        try:
            await app(scope, receive, send_status)
        finally:
            route = route_template(scope)
            if route is not None:
                span.set_attribute("http.route", route)
                span.update_name(f"{method} {route}")
            if status:
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_attribute("error.type", str(status))
                    span.set_status(StatusCode.ERROR)
