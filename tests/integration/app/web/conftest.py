"""A primary with a real streaming replica, for the replica tests of this folder: one
pair a module (each module's service reads on it as its tests need)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.db.schema import upgrade_to_head
from tests.integration.replicas import Pair, streaming_pair


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    with streaming_pair() as started:
        upgrade_to_head(started.primary.url())
        started.wait_for_replay()
        yield started
