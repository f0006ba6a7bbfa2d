"""``compact_json``: PostgreSQL's ``jsonb`` text written as every other answer is."""

from __future__ import annotations

import json

import orjson
import pytest

from app.store.reads import compact_json


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1, "b": [1, 2, {"c": None}], "d": True},
        {"text": 'a "quoted" word, then: a colon'},
        {"ends in a backslash": "C:\\ ", "next": "x, y"},
        {"escaped quote then backslashes": '\\" , : \\\\', "k": ", :"},
        {"unicode": "naïve, café: ✓", "empty": "", "spaces": "   "},
        [],
        "a string, with: spaces",
    ],
)
def test_only_the_spaces_outside_strings_go(value: object) -> None:
    spaced = json.dumps(value, ensure_ascii=False)  # ", " and ": ", as jsonb writes them
    compacted = compact_json(spaced)
    assert orjson.loads(compacted) == value
    assert compacted == orjson.dumps(value).decode()


def test_numbers_keep_their_digits() -> None:
    assert compact_json('{"x": 0.1000000000000000055511151231257827, "y": 1.50}') == (
        '{"x":0.1000000000000000055511151231257827,"y":1.50}'
    )
