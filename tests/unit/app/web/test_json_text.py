"""The one rule for JSON read from a request (``app.web.json_text``)."""

from __future__ import annotations

import orjson
import pytest

from app.errors import InvalidJSON, UnsupportedMediaType
from app.web import json_text


class TestLoads:
    @pytest.mark.parametrize(
        "body",
        [
            b'{"a":1,"a":2}',
            b'[{"x":{"k":":","k":"::"}}]',
            b'{"a":"\\u003a","a":"\\u003A"}',  # escaped colons balance the duplicate's
            b'{"a":"\\u003a","b":{"a":1},"b":2}',
        ],
    )
    def test_a_member_named_twice_is_refused_by_name(self, body: bytes) -> None:
        with pytest.raises(InvalidJSON, match="twice") as refused:
            json_text.loads(body)
        assert refused.value.extensions["member"] in ("a", "b", "k")

    @pytest.mark.parametrize(
        "body",
        [
            b'{"t":"12:00:00","u":"a:b"}',
            b'{"a":"\\u003a","b":"\\\\u003a"}',  # an escaped colon; a backslash and text
            b'{ "a" : 1 , "b" : { "a" : 2 } }',
            b"[1, 2.5]",
            b'"no objects at all"',
        ],
    )
    def test_the_same_name_in_other_objects_and_colons_in_strings_pass(self, body: bytes) -> None:
        assert json_text.loads(body) == orjson.loads(body)

    def test_what_is_not_json_is_refused(self) -> None:
        with pytest.raises(InvalidJSON, match="not valid JSON"):
            json_text.loads(b'{"a": 1,')


class TestArrayItems:
    def test_reads_the_items_as_loads_does(self) -> None:
        body = b' [ {"a": [1, 2.5, "x:y"]}, 18446744073709551616, null ] '
        assert list(json_text.array_items(body)) == orjson.loads(body)

    @pytest.mark.parametrize(
        ("body", "match"),
        [
            (b'[{"a":1,"a":2}]', "twice"),
            (b"[NaN]", "not a JSON number"),
            (b'["\\ud800"]', "not valid JSON"),
            (b"[1 2]", "expected ','"),
            (b"[1] x", "more after the array"),
            (b"[1,", "not valid JSON"),
        ],
    )
    def test_refuses_what_loads_refuses(self, body: bytes, match: str) -> None:
        with pytest.raises(InvalidJSON, match=match):
            list(json_text.array_items(body))

    def test_an_empty_array_has_no_items(self) -> None:
        assert list(json_text.array_items(b"[ ]\n")) == []


class TestCharset:
    @pytest.mark.parametrize(
        "content_type",
        ["application/json", "application/json; charset=UTF-8", 'application/x+json;charset="utf8"',
         "text/plain; charset=latin-1"],
    )  # fmt: skip
    def test_utf8_no_charset_and_other_types_pass(self, content_type: str) -> None:
        json_text.refuse_other_charsets(content_type)

    def test_another_charset_on_json_is_unsupported(self) -> None:
        with pytest.raises(UnsupportedMediaType, match="'utf-16'"):
            json_text.refuse_other_charsets("application/json; charset=UTF-16")
