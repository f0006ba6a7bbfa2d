"""``causeway anchor`` appends to a journal an operator may also edit by hand: its line is
a line of its own even when the journal's last line lacks its newline. It was appended
to that line, where ``verify --anchors`` never read it, so a rewrite passed as intact."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from sqlalchemy import URL
from typer.testing import CliRunner

from app.cli import cli
from app.db.engine import libpq_conninfo
from tests.integration.app.test_cli import store
from tests.integration.forgery import rewrite


@pytest.fixture
def run(database_url: URL, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("CAUSEWAY_DATABASE_URL", database_url.render_as_string(hide_password=False))
    return CliRunner()


def test_an_anchor_appended_after_a_comment_without_newline_still_catches_a_rewrite(
    run: CliRunner, database_url: URL, tmp_path: Path
) -> None:
    """The journal starts with a comment an operator typed (an editor or `printf` that
    left no final newline)."""
    journal = tmp_path / "anchors.log"
    journal.write_text("# anchors of the production store, kept on the audit host")
    store(database_url, "acme", 5)
    appended = run.invoke(cli, ["anchor", str(journal)])
    assert appended.exit_code == 0, appended.output
    rewrite(database_url, 5, {"i": 99}, move_head=True)
    result = run.invoke(cli, ["verify", "--anchors", str(journal)])
    assert result.exit_code == 1, (
        f"the rewrite passed against the journal {journal.read_text()!r}: {result.output}"
    )


def test_an_anchor_appended_after_an_anchor_line_without_newline_is_checked(
    run: CliRunner, database_url: URL, tmp_path: Path
) -> None:
    """A journal whose last anchor line lost its newline (copied over by hand): the new
    anchor became the third word of the old line."""
    journal = tmp_path / "anchors.log"
    store(database_url, "acme", 3)
    assert run.invoke(cli, ["anchor", str(journal)]).exit_code == 0
    journal.write_text(journal.read_text().rstrip("\n"))
    store(database_url, "acme2", 2)
    assert run.invoke(cli, ["anchor", str(journal)]).exit_code == 0
    rewrite(database_url, 5, {"i": 99}, move_head=True)
    result = run.invoke(cli, ["verify", "--anchors", str(journal)])
    assert result.exit_code == 1, (
        f"the rewrite passed against the journal {journal.read_text()!r}: {result.output}"
    )


@pytest.mark.parametrize("given", ["--anchors", "--anchor"])
def test_a_head_rewritten_between_two_anchor_runs_is_a_broken_chain(
    run: CliRunner, database_url: URL, tmp_path: Path, given: str
) -> None:
    """No append between two runs of ``anchor`` on a timer, the head rewritten between
    them: the journal holds two hashes for one position, the very rewrite anchors are
    kept for. verify took it for bad input (exit 2), which a monitor watching for 1
    reads as its own misconfiguration, and did so at every run after."""
    journal = tmp_path / "anchors.log"
    store(database_url, "acme", 5)
    assert run.invoke(cli, ["anchor", str(journal)]).exit_code == 0
    rewrite(database_url, 5, {"i": 99}, move_head=True)  # the forger moves the head too
    assert run.invoke(cli, ["anchor", str(journal)]).exit_code == 0  # the next run
    first, second = (line.split()[0] for line in journal.read_text().splitlines())
    assert (first[:2], second[:2]) == ("5:", "5:")
    # The journal, or the two by hand, the newer first: the chain holds that one now.
    argv = ["--anchors", str(journal)] if given == "--anchors" else [
        "--anchor", second, "--anchor", first]  # fmt: skip
    result = run.invoke(cli, ["verify", *argv])
    assert result.exit_code == 1, (result.exit_code, result.output)
    assert "hash chain broken at position 5" in result.stderr
    if given == "--anchor":
        assert "rewritten between the two" in result.stderr


def test_an_anchor_of_a_log_whose_head_row_is_gone_is_an_alarm_not_the_empty_log(
    run: CliRunner, database_url: URL, tmp_path: Path
) -> None:
    """The anchor timer said "the log is empty: nothing to anchor", exit 0, for a store of
    four events whose log_head row was deleted (verify calls it a break): the alarm went
    quiet (from a review). It exits 1, naming the missing row."""
    store(database_url, "acme", 4)
    with psycopg.connect(libpq_conninfo(database_url), autocommit=True) as conn:
        conn.execute("DELETE FROM log_head")
    journal = tmp_path / "anchors.log"
    result = run.invoke(cli, ["anchor", str(journal)])
    assert (result.exit_code, result.stderr) == (
        1,
        "error: the log head row is missing: run `causeway verify`\n",
    )
    assert not journal.exists()
