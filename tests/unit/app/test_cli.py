"""The command line's contract for bad input: one line on stderr, exit code 2."""

from __future__ import annotations

import pytest

from app.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["keys", "create", "--tenant", "x"], "error: Missing option '--scopes'.\n"),
        (["serve", "--workers", "0"], "error: Invalid value for '--workers'"),
        (["nosuch"], "error: No such command 'nosuch'.\n"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    argv: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr("sys.argv", ["causeway", *argv])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(message)
    assert err.count("\n") == 1
