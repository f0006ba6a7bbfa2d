"""The server span of every HTTP request (``docs/observability.md``, Traces).

``Causeway.__call__`` calls ``traced`` only when ``tracing.on``: with tracing off the
request never reaches this module. The span continues the caller's W3C ``traceparent``
header (a request with several has none to continue; several ``tracestate`` fields are
one list, as W3C Trace Context says), is named ``{method} {route}`` once the router has
matched the route template (the fast ``POST /events`` path names its own), and carries
the stable HTTP server attributes. A method the semantic conventions do not know is
``_OTHER`` (the span ``HTTP {route}``), the method sent in ``http.request.method_original``:
no client can make span names or attribute values of its own."""

from __future__ import annotations

from opentelemetry.trace import SpanKind, StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.telemetry import tracing
from app.web.route_templates import route_template

# The methods the HTTP semantic conventions know (http.request.method).
_KNOWN_METHODS = frozenset(
    {"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"}
)


async def traced(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer the request with ``app`` inside its server span."""
    sent = scope["method"]
    method = sent if sent in _KNOWN_METHODS else "_OTHER"
    parents: list[str] = []
    states: list[str] = []
    for name, value in scope["headers"]:
        if name == b"traceparent":
            parents.append(value.decode("latin-1"))
        elif name == b"tracestate":
            states.append(value.decode("latin-1"))
    parent = tracing.context_of(
        parents[0] if len(parents) == 1 else None, ",".join(states) if states else None
    )
    attributes = {
        "http.request.method": method,
        "url.path": scope["path"],
        "url.scheme": scope.get("scheme", "http"),
        "network.protocol.name": "http",
    }
    if method != sent:
        attributes["http.request.method_original"] = sent
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

    named = "HTTP" if method == "_OTHER" else method
    with tracing.tracer().start_as_current_span(
        named, context=parent, kind=SpanKind.SERVER, attributes=attributes
    ) as span:
        try:
            await app(scope, receive, send_status)
        finally:
            route = route_template(scope)
            if route is not None:
                span.set_attribute("http.route", route)
                span.update_name(f"{named} {route}")
            if status:
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_attribute("error.type", str(status))
                    span.set_status(StatusCode.ERROR)
