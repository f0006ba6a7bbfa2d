"""Filters refused before a statement is built: empty ones, and ones listing too much."""

from __future__ import annotations

import pytest

from app.errors import BadRequest
from app.store.records import MAX_FILTER_VALUES, refuse_empty_filters


def test_a_filter_of_more_than_the_cap_values_is_refused_by_name() -> None:
    with pytest.raises(BadRequest, match="types lists 101 values, over the limit of 100"):
        refuse_empty_filters({"types": ["t"] * (MAX_FILTER_VALUES + 1), "stream": "s"})


def test_a_filter_at_the_cap_passes() -> None:
    refuse_empty_filters({"types": [f"t{i}" for i in range(MAX_FILTER_VALUES)], "stream": "s"})
