"""The key check in front of every request (``app.web.auth``)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from app.db.engine import Engine
from app.web.auth import Authenticator


class _NoDatabase:
    def connect(self) -> Any:
        raise AssertionError("a malformed key was looked up in the database")


@pytest.mark.parametrize(
    "key", ["", "nonsense", "cw_" + "0" * 12, "Bearer cw_x", "cw_" + "0" * 12 + "_" + "a" * 42]
)
async def test_what_no_key_can_be_is_refused_without_the_database(key: str) -> None:
    """Each malformed key took a pooled connection (the pool the writer shares) for a
    lookup that could find nothing, and failed ones are not cached: a flood of junk keys
    could hold the pool."""
    authenticator = Authenticator(cast(Engine, _NoDatabase()), ttl_s=5)
    assert await authenticator.authenticate(key) is None
