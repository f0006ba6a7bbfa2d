"""Names that end up in keys, streams and URLs match their whole text: a trailing newline,
which a ``$`` anchor lets through, is refused like any other stray character."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.errors import BadRequest
from app.store.keys import TENANT_PATTERN
from app.store.model_registry import is_valid_name
from app.store.timestamps import parse_rfc3339
from scheduler.routes import parse_route


def _tenant(text: str) -> bool:
    return TENANT_PATTERN.match(text) is not None


def _time(text: str) -> bool:
    return parse_rfc3339(text)[0] is not None


def _route_id(text: str) -> bool:
    try:
        parse_route({"id": text, "types": ["a"], "kind": "k", "queue": "q"})
    except BadRequest:
        return False
    return True


CHECKS: list[tuple[str, Callable[[str], bool], str]] = [
    ("tenant", _tenant, "acme"),
    ("model name", is_valid_name, "model-1.v2"),
    ("time", _time, "2026-11-30T12:00:00Z"),
    ("route id", _route_id, "frames.v2"),
]


@pytest.mark.parametrize(("what", "accepts", "good"), CHECKS, ids=[c[0] for c in CHECKS])
def test_the_whole_text_must_match(what: str, accepts: Callable[[str], bool], good: str) -> None:
    assert accepts(good), what
    assert not accepts(good + "\n"), what
