"""Names that end up in keys, streams and URLs match their whole text: a trailing newline,
which a ``$`` anchor lets through, is refused like any other stray character."""

from __future__ import annotations

import pytest

from app.store.keys import TENANT_PATTERN
from app.store.models import is_valid_name
from app.store.timestamps import parse_rfc3339


@pytest.mark.parametrize("name", ["acme", "model-1.v2"])
def test_plain_names_pass(name: str) -> None:
    assert TENANT_PATTERN.match(name.lower())
    assert is_valid_name(name)


@pytest.mark.parametrize("name", ["acme\n", "model\n"])
def test_a_trailing_newline_is_refused(name: str) -> None:
    assert TENANT_PATTERN.match(name) is None
    assert not is_valid_name(name)
    assert parse_rfc3339("2026-11-30T12:00:00Z\n")[0] is None
