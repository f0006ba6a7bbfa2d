"""Route parsing and matching: types, predicates on extensions and data, priorities,
requirements and debounce keys."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from app.errors import BadRequest
from app.store.chain import ChainRecord
from scheduler.routes import parse_predicate, parse_route, route_from_json


def record(
    event_type: str = "home.sensor.changed", data: Any = None, **extensions: Any
) -> ChainRecord:
    return ChainRecord(
        position=1, tenant="t", id="e1", source="/s", type=event_type, subject=None,
        time="2026-11-30T12:00:00Z", recorded_at=datetime.now(UTC), stream="s",
        stream_version=1, datacontenttype="application/json", dataschema=None,
        has_data=data is not None, data=data, data_binary=None, extensions=extensions,
        causes=(), correlation_id=None, model_name=None, model_version=None,
        model_signature=None,
    )  # fmt: skip


def route(**spec: Any) -> Any:
    return parse_route({"id": "r", "types": ["home.*"], "kind": "k", "queue": "q", **spec})


class TestMatching:
    def test_prefix_and_exact_types(self) -> None:
        assert route().matches(record("home.sensor.changed"))
        assert not route().matches(record("garden.sensor"))
        exact = route(types=["home.sensor.changed"])
        assert exact.matches(record("home.sensor.changed"))
        assert not exact.matches(record("home.sensor.changed.v2"))

    def test_predicates_read_extensions_then_data(self) -> None:
        r = route(where=["device_type=light", "room in (bedroom, kitchen)", "user_id exists"])
        assert r.matches(record(data={"device_type": "light", "room": "kitchen", "user_id": 1}))
        assert r.matches(record(data={"room": "bedroom", "user_id": "u"}, device_type="light"))
        assert not r.matches(record(data={"device_type": "light", "room": "garage", "user_id": 1}))
        assert not r.matches(record(data={"device_type": "light", "room": "kitchen"}))
        assert not r.matches(record(data=None))

    def test_values_compare_as_json_text(self) -> None:
        assert route(where=["armed=true"]).matches(record(data={"armed": True}))
        assert route(where=["floor in (1, 2)"]).matches(record(data={"floor": 2}))
        assert route(where=["data.mode!=eco"]).matches(record(data={"mode": "max"}, mode="eco"))
        assert route(where=["ext.mode not exists"]).matches(record(data={"mode": "eco"}))

    def test_an_upper_case_prefix_of_the_in_and_exists_forms_reads_as_lower_case(
        self,
    ) -> None:
        """Their keywords match in any case, the prefix too: ``DATA.room in (kitchen)``
        was taken, then matched nothing (only ``data.`` and ``ext.`` were looked up)."""
        assert route(where=["DATA.room in (kitchen)"]).matches(record(data={"room": "kitchen"}))
        assert route(where=["Ext.mode EXISTS"]).matches(record(mode="eco"))
        assert not route(where=["DATA.room NOT IN (kitchen)"]).matches(
            record(data={"room": "kitchen"})
        )

    def test_system_decisions_never_match(self) -> None:
        assert not route(types=["causeway.*"]).matches(record("causeway.task.created"))


class TestParsing:
    def test_priority_comes_from_the_event_when_the_route_names_none(self) -> None:
        assert route().priority_for(record(priority="8")) == 8
        assert route().priority_for(record(priority="banana")) == 5
        assert route().priority_for(record(priority="42")) == 9
        assert route(priority=3).priority_for(record(priority="8")) == 3

    @pytest.mark.parametrize(
        ("sent", "priority"),
        [("9.0", 9), ("1e1", 9), (9, 9), (-2, 0), ("-3.5", 0), ("7.9", 7), ("1e999", 9),
         ("1_0", 5), (" 9", 5), ("nan", 5), ("inf", 5), (True, 5), ("", 5)],
    )  # fmt: skip
    def test_a_priority_that_is_a_number_in_any_json_spelling_is_clamped(
        self, sent: object, priority: int
    ) -> None:
        """ "9.0" and "1e1" (numbers, as binary mode sends every extension: text) read as
        no number, 5, and a spot worker took guaranteed work; "1_0" read as 10."""
        assert route().priority_for(record(priority=sent)) == priority

    def test_model_size_counts_against_gpu_memory(self) -> None:
        r = route(requires={"gpu_memory_gb": 8, "model_size_gb": 12, "fp16": True, "int8": False})
        assert r.requires.numbers == {"gpu_memory_gb": 12.0}
        assert r.requires.flags == ("fp16",)

    def test_the_stored_form_parses_to_the_same_route(self) -> None:
        r = route(
            where=["room in (a, b)"], requires={"gpu_memory_gb": 4, "labels": {"zone": "x"}},
            debounce={"key": "user_id", "window_s": 5}, max_retries=1,
        )  # fmt: skip
        assert route_from_json(r.as_json()) == r

    def test_debounce_key_value(self) -> None:
        r = route(debounce={"key": "user_id", "window_s": 5})
        assert r.debounce_value(record(data={"user_id": 42})) == "42"
        assert r.debounce_value(record(data={})) is None

    @pytest.mark.parametrize(
        "text",
        ["room in ()", "room ~ x", "= x", "a b c"],
    )
    def test_a_malformed_predicate_says_which(self, text: str) -> None:
        with pytest.raises(BadRequest, match="predicate"):
            parse_predicate(text)

    @pytest.mark.parametrize(
        ("text", "value"),
        [("a=b", "b"), (" a = b  c \t", "b  c"), ("a=b\n", "b"), ("a!=", ""),
         ("a!= \xa0\u2003\n\u2000\x1a\xbc\x0c", "\x1a\xbc"), ("a=\n", ""),
         ("a=" + " " * 50_000 + "b", "b"), ("a=b" + " " * 50_000, "b")],
    )  # fmt: skip
    def test_an_equality_takes_its_value_stripped(self, text: str, value: str) -> None:
        assert parse_predicate(text).values == (value,)

    def test_a_long_equality_is_read_in_one_pass(self) -> None:
        """A run of blanks in ``a=b   ...`` took the matcher quadratic time (30 KB: 5 s,
        on the request and again in every dispatcher batch; 50 KB: some 15 s), where one
        pass takes a millisecond: a bound far from both."""
        started = time.perf_counter()
        assert parse_predicate("a=b" + " " * 50_000 + "c").values == ("b" + " " * 50_000 + "c",)
        with pytest.raises(BadRequest, match="predicate"):
            parse_predicate("a=b" + " " * 50_000 + "\nc")
        assert time.perf_counter() - started < 1.0

    def test_a_route_must_do_something(self) -> None:
        with pytest.raises(BadRequest, match="makes tasks"):
            parse_route({"id": "r", "types": ["a"]})
