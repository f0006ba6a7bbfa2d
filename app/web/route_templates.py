"""The route template a request was answered under (``/events/{event_id}``), never its
raw path: what the request metrics are labelled with and what a request's span is named."""

from __future__ import annotations

from starlette.types import Scope

# Routes whose template the scope does not say: the two answered before FastAPI's router
# (``app.main.Causeway.answer``), GraphQL's GET (its router is included under a prefix:
# the route in the scope says ""), and the OpenAPI document (a plain Starlette route,
# which puts none in the scope).
_OWN_ROUTES = frozenset({"/events", "/graphql", "/openapi.json"})


def route_template(scope: Scope) -> str | None:
    """The template of the route the router matched, convertors left out
    (``/events/{event_id:path}`` is ``/events/{event_id}``); the path of the two routes
    answered before the router; None when no route took the request."""
    template = getattr(scope.get("route"), "path_format", None)
    if isinstance(template, str) and template:
        return template
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):  # under a path prefix, which the path holds
        path = path[len(root) :]
    return path if path in _OWN_ROUTES else None
