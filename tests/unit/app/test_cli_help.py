"""Every command's ``--help``, of ``causeway`` and of the bridge's own CLI: each option and
argument says what it is for, an option's value reads as a word (``--port PORT``, never
``<int range>``), a flag shows none (no ``--help <bool>``), and an option that may be left
out says what leaving it out means."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from app.cli import cli
from evs_bridge.cli import cli as evs_cli

_WORD = re.compile(r"[A-Z][A-Z0-9_]*(?:[:=|][A-Z0-9_:|=]+)?|4\|8")
_TYPE_AS_METAVAR = re.compile(r"^\s+-{1,2}[\w-]+(?: / -{1,2}[\w-]+)?\s+<")


def _commands(app: typer.Typer, prog: str) -> Iterator[tuple[list[str], Any]]:
    def walk(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])

    yield from walk(get_command(app), [prog])


_ALL = [*_commands(cli, "causeway"), *_commands(evs_cli, "python -m evs_bridge")]


@pytest.mark.parametrize(("path", "command"), _ALL, ids=[" ".join(p) for p, _ in _ALL])
def test_every_option_says_what_it_is_and_its_default(path: list[str], command: Any) -> None:
    ctx = command.context_class(command, info_name=" ".join(path))
    for param in command.get_params(ctx):
        names, text = param.get_help_record(ctx)
        assert text.strip(), f"{' '.join(path)} {names}: no help"
        if param.param_type_name == "argument":
            # the word alone: no type label after it ("FILE", never "FILE <path>")
            assert _WORD.fullmatch(names), f"{' '.join(path)}: argument {names}"
            continue
        value = names.split(" / ")[0].split(maxsplit=1)[1:]  # what follows the option's name
        if param.is_flag:
            assert not value, f"{' '.join(path)} {names}: a flag shows a value"
        else:
            assert value, f"{' '.join(path)}: {names}"
            assert _WORD.fullmatch(value[0]), f"{' '.join(path)}: {names}"
        if not param.required and param.expose_value:  # not --help, not the completion flags
            assert "default:" in text, f"{' '.join(path)} {names}: no default shown"


@pytest.mark.parametrize(("path", "command"), _ALL, ids=[" ".join(p) for p, _ in _ALL])
def test_help_prints_no_type_in_angle_brackets(path: list[str], command: Any) -> None:
    app = cli if path[0] == "causeway" else evs_cli
    result = CliRunner().invoke(app, [*path[1:], "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    options = result.output.split("Options:", 1)[1]
    for line in options.splitlines():
        assert not _TYPE_AS_METAVAR.match(line), f"{' '.join(path)}: {line}"


@pytest.mark.parametrize(("path", "command"), _ALL, ids=[" ".join(p) for p, _ in _ALL])
def test_help_names_only_options_the_command_has(path: list[str], command: Any) -> None:
    """An option's help that points to another option names one of the same command
    (``evs drain`` and ``evs mqtt`` said ``--target`` could be left for ``--out``)."""
    ctx = command.context_class(command, info_name=" ".join(path))
    own = {name for param in command.get_params(ctx) for name in param.opts}
    for param in command.get_params(ctx):
        _, text = param.get_help_record(ctx)
        named = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", text))
        assert named <= own, f"{' '.join(path)}: {text!r} names {named - own}"
