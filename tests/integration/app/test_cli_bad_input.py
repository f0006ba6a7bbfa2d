"""The ``causeway`` command with bad input: one line on stderr and exit 2, no traceback
(``app/cli/__init__.py``: "Bad input prints ``error: <detail>`` on stderr and exits 2")."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import URL
from typer.testing import CliRunner

from app.cli import cli
from app.db.engine import libpq_conninfo


@pytest.fixture
def run(database_url: URL, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("CAUSEWAY_DATABASE_URL", database_url.render_as_string(hide_password=False))
    return CliRunner()


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


@pytest.mark.parametrize("empty", ["", " ", ","])
def test_replay_refuses_a_types_option_given_empty(run: CliRunner, empty: str) -> None:
    """GET /replay refuses `types=a.v1&types=` (422); `causeway replay --types a.v1
    --types ""` exported the events of a.v1 alone and exited 0: a script whose second
    variable was unset exported part of what it asked for."""
    result = run.invoke(cli, ["replay", "--out", "-", "--types", "a.v1", "--types", empty])
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert result.stderr == "error: --types is given empty: each --types names at least one type\n"
    assert result.stdout == ""


_TWO_VALUES = {
    "--correlationid": ["run-1", "run-2"],
    "--stream": ["s-1", "s-2"],
    "--since": ["2026-01-01T00:00:00Z"] * 2,
    "--after": ["0", "10"],
    "--limit": ["10", "20"],
    "--format": ["ndjson", "parquet"],
    "--tenant": ["acme", "globex"],
    "--out": ["-", "-"],
}


@pytest.mark.parametrize("option", sorted(_TWO_VALUES))
def test_replay_refuses_an_option_of_one_value_given_twice(run: CliRunner, option: str) -> None:
    """It kept the last, as the HTTP API did: an export of two runs silently held one,
    and `--limit 10 --limit 20` exported 20."""
    values = _TWO_VALUES[option]
    argv = ["replay", *([] if option == "--out" else ["--out", "-"]), option, values[0]]
    argv += [option, values[1]]
    result = run.invoke(cli, argv)
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert result.stderr == (
        f"error: {option} is given 2 times: it takes one value (only --types takes many)\n"
    )
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("option", "values"),
    [("--tenant", ["acme", "globex"]), ("--scopes", ["read", "admin"]),
     ("--description", ["a", "b"])],
)  # fmt: skip
def test_keys_create_refuses_an_option_given_twice_and_makes_no_key(
    run: CliRunner, database_url: URL, option: str, values: list[str]
) -> None:
    """Click keeps the last of a single option: `--scopes read --scopes admin` made an
    admin key, and a second `--tenant` gave it to another tenant, with exit 0."""
    argv = ["keys", "create", "--tenant", "acme", "--scopes", "read", option, values[1]]
    if option == "--description":
        argv += [option, values[0]]
    result = run.invoke(cli, argv)
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert result.stderr == f"error: {option} is given 2 times: it takes one value\n"
    with psycopg.connect(libpq_conninfo(database_url)) as conn:
        assert conn.execute("SELECT count(*) FROM api_keys").fetchone() == (0,)


@pytest.mark.parametrize("value", ["1_0", "+2", " 2", "2.0", "-1"])
@pytest.mark.parametrize("option", ["--after", "--limit"])
def test_replay_reads_a_number_from_plain_digits(run: CliRunner, option: str, value: str) -> None:
    """Read with ``int()``, ``--after 1_0`` resumed after position 10, and the export
    silently lacked events 1 to 10."""
    result = run.invoke(cli, ["replay", "--out", "-", option, value])
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert f"Invalid value for '{option}': {value!r} is not a whole number" in result.stderr
    assert result.stdout == ""


def test_the_tenant_the_metrics_name_their_overflow_is_reserved(run: CliRunner) -> None:
    """The metrics label tenants past their bound ``other``, and every tenant's scrape
    shows that bucket: a tenant of that name would show its sources to all."""
    result = run.invoke(cli, ["keys", "create", "--tenant", "other", "--scopes", "ingest"])
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert result.stderr.startswith("error: tenant 'other' is reserved")
    assert result.stderr.count("\n") == 1
