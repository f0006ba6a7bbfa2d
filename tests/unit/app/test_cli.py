"""The command line's contract for bad input: one line on stderr, exit code 2."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from app.cli import main, serve
from app.settings import Settings


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["keys", "create", "--tenant", "x"], "error: Missing option '--scopes'.\n"),
        (["keys", "create", "--tenant", "x", "--scopes", "root"], "error: scopes must be"),
        (["serve", "--host", ""], "error: --host must name an address"),
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
        (
            ["projections", "rebuild", "model-registry", "--timeout-s", "nan"],
            "error: Invalid value for '--timeout-s': must be a finite number of seconds",
        ),
        (
            ["replay", "--out", "x", "--tenant", "Acme"],
            "error: Invalid value for '--tenant': must be 1-63 of a-z",
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
        (["relay", "status"], "error: cannot use the database:"),
        (["relay", "nats"], "error: cannot use the database:"),
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
    monkeypatch.setenv("CAUSEWAY_NATS_URL", "nats://127.0.0.1:1")
    monkeypatch.setattr("sys.argv", ["causeway", *command])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(message), err
    assert err.count("\n") == 1


_URL = "postgresql://postgres@127.0.0.1:1/x"


def test_an_autoscale_step_longer_than_the_retention_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A step reads the waits of the tasks leased since the last one from their rows: with
    a 2 h step and rows kept 1 h, the waits of those pruned meanwhile were left out (a
    queue that waited six times its target read 0 s)."""
    monkeypatch.setenv("CAUSEWAY_SCHEDULER_TASK_RETENTION_S", "3600")
    monkeypatch.setenv("CAUSEWAY_SCHEDULER_AUTOSCALE_INTERVAL_S", "7200")
    monkeypatch.setattr("sys.argv", ["causeway", "verify"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: setting CAUSEWAY_SCHEDULER_AUTOSCALE_INTERVAL_S: ")
    assert "at most CAUSEWAY_SCHEDULER_TASK_RETENTION_S (3600 s)" in err


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        # Attributes are indexed, and a btree entry holds 2704 bytes: past 2048, an event
        # with one long attribute would be refused by PostgreSQL as a 503, not a 422.
        ("MAX_ATTRIBUTES_BYTES", "100000", "Input should be less than or equal to 2048"),
        ("REPLAY_FETCH_ROWS", "2147483648", "Input should be less than or equal to 1000000"),
        # An infinite TTL kept a revoked key working for the life of the process.
        ("KEY_CACHE_TTL_S", "inf", "Input should be a finite number"),
        ("PROJECTION_POLL_INTERVAL_S", "nan", "Input should be a finite number"),
        # libpq would refuse these only when connecting, with a traceback.
        ("DATABASE_URL", f"{_URL}?foo=bar", 'invalid URI query parameter: "foo"'),
        ("DATABASE_URL", f"{_URL}?connect_timeout=abc", "connect_timeout must be a whole number"),
        ("DATABASE_URL", f"{_URL}?port=abc", "port must be a whole number"),
        # Replaced by the engines' own options, kept by Alembic's: a search_path had
        # `migrate` build a schema no other command looked in.
        ("DATABASE_URL", f"{_URL}?options=-csearch_path%3Dx", "takes no options="),
        ("READ_DATABASE_URL", f"{_URL}?options=-cwork_mem%3D64MB", "takes no options="),
        # JetStream refuses a stream name with a dot; the relay would retry for ever.
        ("NATS_STREAM", "causeway.events", "must be a JetStream stream name"),
        ("NATS_TENANTS", "acme,-globex", "not both"),
        # A name no key can have relayed none of its events (or, a bare '-', every one).
        ("NATS_TENANTS", "Acme", "'Acme' names no tenant a key can have"),
        ("NATS_TENANTS", "-", "'-' names no tenant a key can have"),
        ("NATS_DUPLICATE_WINDOW_S", "5", "at least twice CAUSEWAY_NATS_ACK_TIMEOUT_S"),
        ("NATS_URL", "http://127.0.0.1:4222", "is not a nats:// or tls:// server URL"),
        ("NATS_REPLICAS", "7", "Input should be less than or equal to 5"),
        # Taken, it turned every POST of an event with a time into a 500 (OverflowError).
        ("MAX_FUTURE_S", "1e15", "Input should be less than or equal to 3153600000"),
        # Taken, they failed every audit (an int of SQL) and every autoscale step (an
        # integer column), or overflowed the step's timedelta, at run time.
        ("GRAPHQL_MAX_LINEAGE_NODES", "3000000000", "less than or equal to 2147483647"),
        ("SCHEDULER_MIN_WORKERS", "3000000000", "less than or equal to 2147483647"),
        ("SCHEDULER_MAX_WORKERS", "3000000000", "less than or equal to 2147483647"),
        ("SCHEDULER_AUTOSCALE_INTERVAL_S", "1e11", "less than or equal to 86400"),
    ],
)
def test_a_setting_out_of_its_range_is_one_line_and_exit_2(
    name: str,
    value: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(f"CAUSEWAY_{name}", value)
    monkeypatch.setattr("sys.argv", ["causeway", "verify"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: setting CAUSEWAY_{name}: ")
    assert message in err
    assert err.count("\n") == 1


def test_a_dot_env_that_is_not_utf8_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".env").write_bytes(b"\xff\xfe x\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["causeway", "verify"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    assert capsys.readouterr().err == "error: .env is not UTF-8: invalid start byte at byte 0\n"


def test_a_port_in_use_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Checked before any database is started; uvicorn logged it and exited 3.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr("sys.argv", ["causeway", "serve", "--port", str(port)])
        with pytest.raises(SystemExit) as exited:
            main()
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    )


def test_demo_without_a_service_says_how_to_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CAUSEWAY_DATA_DIR", str(tmp_path))  # no address, no key kept there
    monkeypatch.setattr("sys.argv", ["causeway", "demo"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        f"error: no address in {tmp_path / 'address'}: start the service with `make run` "
        "(in another terminal) first, or give --target URL --key KEY\n"
    )


def test_the_relay_without_a_nats_url_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CAUSEWAY_NATS_URL", raising=False)
    monkeypatch.setattr("sys.argv", ["causeway", "relay", "nats"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    assert (
        capsys.readouterr().err
        == "error: set CAUSEWAY_NATS_URL to the NATS server(s) to relay to\n"
    )


def test_the_bootstrap_admin_key_is_never_readable_by_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make run``'s first start writes tenant ``default``'s admin key to
    ``.causeway/admin.key``: private from its creation, never for a moment with the
    umask's mode (0644 under the usual 022), readable by every local user."""
    previous = os.umask(0o022)
    try:

        async def issued(*_: Any) -> str:
            return "cw_000000000000_" + "a" * 43

        monkeypatch.setattr(serve, "create_key", issued)
        modes: list[int] = []
        real_chmod = os.chmod

        def watched_chmod(path: Any, mode: int, **kw: Any) -> None:
            modes.append(stat.S_IMODE(os.stat(path).st_mode))  # as it lay on disk until now
            real_chmod(path, mode, **kw)

        monkeypatch.setattr(os, "chmod", watched_chmod)
        serve._bootstrap_admin_key(Settings(_env_file=None, data_dir=tmp_path), "postgresql://x/y")
    finally:
        os.umask(previous)
    assert modes, "the key file was never narrowed"
    assert modes[0] & 0o077 == 0, f"admin.key was written with mode {oct(modes[0])} first"
