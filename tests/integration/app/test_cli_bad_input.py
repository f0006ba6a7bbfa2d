"""The ``causeway`` command with bad input: one line on stderr and exit 2, no traceback
(``app/cli/__init__.py``: "Bad input prints ``error: <detail>`` on stderr and exits 2")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import URL
from typer.testing import CliRunner

from app.cli import cli
from tests.integration.process import create_key, environment, serving


@pytest.fixture
def run(database_url: URL, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("CAUSEWAY_DATABASE_URL", database_url.render_as_string(hide_password=False))
    return CliRunner()


def _demo(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "demo", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _env(database_url: URL, tmp_path: Path) -> dict[str, str]:
    return environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
        CAUSEWAY_SCHEDULER_AUTOSCALE_INTERVAL_S="3600",
    )


def test_demo_with_a_wrong_key_is_one_line_not_a_traceback(
    database_url: URL, tmp_path: Path
) -> None:
    """A mistyped or revoked --key is bad input: one line, exit 2 (it was Typer's
    traceback panel and exit 1)."""
    env = _env(database_url, tmp_path)
    with serving(env) as base:
        result = _demo(env, "--target", base, "--key", "cw_000000000000_wrong")
    assert "Traceback" not in result.stderr, result.stderr
    assert "╭" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ")
    assert result.stderr.count("\n") == 1, result.stderr


def test_demo_with_a_file_that_is_no_recording_is_one_line_not_a_traceback(
    database_url: URL, tmp_path: Path
) -> None:
    """``--recording`` naming a file the bridge cannot read (the wrong file, a damaged
    .db3): one line, exit 2 (it was a traceback, ``UnknownFormat`` or ``UnsupportedBag``)."""
    env = _env(database_url, tmp_path)
    key = create_key(env, "default", "admin")
    not_a_recording = tmp_path / "notes.txt"
    not_a_recording.write_text("not a recording\n")
    with serving(env) as base:
        result = _demo(env, "--target", base, "--key", key, "--recording", str(not_a_recording))
    assert "Traceback" not in result.stderr, result.stderr
    assert "╭" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ")
    assert result.stderr.count("\n") == 1, result.stderr


def test_every_anchor_verify_prints_is_taken_back(run: CliRunner) -> None:
    """An empty log has nothing to anchor, and ``--anchor`` takes no position 0: verify
    prints no anchor line for it, so a script that keeps each printed anchor and passes
    them back works from its first run on."""
    first = run.invoke(cli, ["verify"])
    assert first.exit_code == 0, first.output
    assert first.stdout.startswith("ok: 0 events")
    assert not [line for line in first.stdout.splitlines() if line.startswith("anchor: ")]


def test_replay_of_a_tenant_name_no_key_can_have_is_refused(run: CliRunner) -> None:
    """A tenant no key can have (``Acme``: a capital, a typo) is refused, not answered
    with an empty export and exit 0 that looks like a tenant with no events."""
    result = run.invoke(cli, ["replay", "--out", "-", "--tenant", "Acme"])
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert "Invalid value for '--tenant': must be 1-63 of a-z" in result.stderr
    assert result.stdout == ""
