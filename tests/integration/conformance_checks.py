"""Checks of schemathesis' runs (``test_conformance.py`` loads them as their hooks): a
GraphQL answer's errors are the client's, never the server's; and a 503 is only a read
that named a position its read model has not reached (``schemathesis.toml`` lets those
operations answer 503).

schemathesis takes any error a resolver raised for a failure of the server unless its
code is one of Apollo's. Here every error has a code (``app.graphql.errors``): the
client's (``BAD_REQUEST``, ``NOT_FOUND``: a cursor or an id this API never gave out is
what generated queries send), or the server's, which are these."""

from __future__ import annotations

from typing import Any

import schemathesis

SERVER_CODES = frozenset({"INTERNAL", "UNAVAILABLE", "TIMEOUT"})


@schemathesis.check
def graphql_errors_are_the_clients(ctx: Any, response: Any, case: Any) -> bool | None:
    if not case.path.endswith("/graphql"):
        return None
    if response.status_code >= 500:
        raise AssertionError(f"GraphQL answered {response.status_code}")
    if not response.headers.get("content-type", [""])[0].startswith("application/json"):
        return None  # GraphiQL's page, or a problem
    errors = (response.json() or {}).get("errors") or []
    codes = [(e.get("extensions") or {}).get("code") for e in errors]
    if None in codes:
        raise AssertionError(f"a GraphQL error without a code: {errors}")
    failed = [e for e, code in zip(errors, codes, strict=True) if code in SERVER_CODES]
    if failed:
        raise AssertionError(f"the server failed: {failed}")
    return None


@schemathesis.check
def position_waits_are_the_only_503(ctx: Any, response: Any, case: Any) -> bool | None:
    if response.status_code != 503 or case.path.endswith("/graphql"):
        return None
    named = (case.query or {}).get("min_position") or {
        k.lower(): v for k, v in (case.headers or {}).items()
    }.get("causeway-min-position")
    problem = response.json() or {}
    if not named or problem.get("type") != "/problems/unavailable":
        raise AssertionError(f"503 to a read that named no position: {problem}")
    if not response.headers.get("retry-after"):
        raise AssertionError("a 503 without Retry-After")
    return None
