"""The wake-up hint an append sends: which projections a runner wakes for it."""

from __future__ import annotations

from app.store.append.writes import read_wake_hint, wake_hint


class TestWakeHint:
    def test_the_hint_names_the_head_and_the_types_appended(self) -> None:
        hint = wake_hint(42, {"b.type", "a.type"})
        assert hint == "42\na.type\nb.type"
        assert read_wake_hint(hint) == frozenset({"a.type", "b.type"})

    def test_a_type_with_blanks_is_named_whole(self) -> None:
        # CloudEvents types may hold blanks: split on them, "order created" woke the
        # projections of "order" and "created" and not its own.
        hint = wake_hint(9, {"order created", "a.type"})
        assert read_wake_hint(hint) == frozenset({"order created", "a.type"})

    def test_too_many_types_to_fit_wake_everyone(self) -> None:
        hint = wake_hint(7, {f"com.example.type-{n:05d}" for n in range(1000)})
        assert hint == "7"
        assert read_wake_hint(hint) is None

    def test_a_bare_position_wakes_everyone(self) -> None:
        assert read_wake_hint("12") is None
