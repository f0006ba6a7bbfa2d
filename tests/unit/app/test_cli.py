"""The command line's contract for bad input: one line on stderr, exit code 2."""

from __future__ import annotations

import pytest

from app.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["keys", "create", "--tenant", "x"], "error: Missing option '--scopes'.\n"),
        (["keys", "create", "--tenant", "x", "--scopes", "root"], "error: scopes must be"),
        (["keys", "create", "--tenant", "x", "--scopes", "read,,ingest"], "error: scopes must be"),
        (["keys", "create", "--tenant", "x", "--scopes", "read,"], "error: scopes must be"),
        (["keys", "create", "--tenant", "x", "--scopes", ""], "error: scopes must be"),
        (["serve", "--workers", "0"], "error: Invalid value for '--workers'"),
        (["nosuch"], "error: No such command 'nosuch'.\n"),
        (["serve", "--port", "99999"], "error: Invalid value for '--port'"),
        (
            ["replay", "--out", "x", "--after", "99999999999999999999"],
            "error: Invalid value for '--after'",
        ),
        (
            ["replay", "--out", "x", "--limit", "99999999999999999999"],
            "error: Invalid value for '--limit'",
        ),
        (
            ["projections", "rebuild", "model-registry", "--timeout-s", "-1"],
            "error: Invalid value for '--timeout-s'",
        ),
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


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["verify"], "error: cannot use the database: connection failed:"),
        (["projections", "status"], "error: cannot use the database: connection failed:"),
        (["keys", "create", "--tenant", "t", "--scopes", "read"], "error: cannot use the database:"),
        (["replay", "--out", "-"], "error: cannot use the database:"),
        (["migrate"], "error: cannot use the database:"),
        (["project"], "error: cannot use the database:"),  # it used to retry forever
    ],
)  # fmt: skip
def test_a_database_that_cannot_be_reached_is_one_line_and_exit_2(
    command: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Port 1 on loopback: nothing listens there, so the connection is refused at once.
    monkeypatch.setenv("CAUSEWAY_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setattr("sys.argv", ["causeway", *command])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(message), err
    assert err.count("\n") == 1


def test_a_setting_out_of_its_range_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Attributes are indexed, and a btree entry holds 2704 bytes: past 2048, an event with
    # one long attribute would be refused by PostgreSQL as a 503 rather than as a 422.
    monkeypatch.setenv("CAUSEWAY_MAX_ATTRIBUTES_BYTES", "100000")
    monkeypatch.setattr("sys.argv", ["causeway", "serve"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "error: setting CAUSEWAY_MAX_ATTRIBUTES_BYTES: Input should be less than or equal to 2048\n"
    )
