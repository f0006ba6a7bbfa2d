"""Bad input to the command lines (app/cli, scheduler/__main__.py, evs_bridge/cli) is one
line on stderr and exit 2, with no traceback, no hang, and nothing stored or written by
the refused command (README "The command line"). Each case here failed (a review):
`python -m scheduler` ran for ever on a database it could not use and on any argument;
`causeway demo` stored the whole data set before refusing its recording, and left out a
recording it was named that did not exist; `projections rebuild` on an unmigrated
database said the rebuild failed (exit 1); `replay --format ""` wrote NDJSON;
`evs replay --classifier ""` used the built-in one; `evs drain --spool ""` took the
working directory for a spool; `evs mqtt` made its spool before refusing the topic."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from secrets import token_hex

import psycopg
import pytest
from sqlalchemy import URL
from typer.testing import CliRunner

from app.cli import cli
from app.db.engine import libpq_conninfo
from tests.integration.process import create_key, environment, serving

ROOT = Path(__file__).resolve().parents[2]
RECORDING = (
    ROOT
    / "tests/data/evs-samples/event_camera_codecs/test_data_evt3_trigger"
    / "test_data_evt3_trigger_0.db3"
)


def _url(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def _run(
    argv: list[str], env: dict[str, str], timeout_s: float = 30, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; a process still running after ``timeout_s`` fails the test with what
    it printed (killed: a command given bad input must end by itself)."""
    process = subprocess.Popen(
        argv,
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=cwd or ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        tracebacks = err.count("Traceback")
        pytest.fail(
            f"{' '.join(argv[1:])} still ran after {timeout_s:.0f} s (killed); "
            f"{tracebacks} tracebacks on stderr; first lines:\n" + "\n".join(err.splitlines()[:8])
        )
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def _one_line_exit_2(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode == 2, (result.returncode, result.stdout[-500:], result.stderr[-500:])
    assert result.stderr.startswith("error: "), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


@pytest.fixture
def empty_database(server: URL) -> Iterator[URL]:
    """A database that exists but was never migrated (a typo'd or fresh CAUSEWAY_DATABASE_URL)."""
    name = f"cli_unmigrated_{token_hex(4)}"
    admin = libpq_conninfo(server)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.set(database=name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- python -m scheduler ----------------------------------------------------------------


def test_scheduler_on_an_unmigrated_database_is_one_line_and_exit_2(empty_database: URL) -> None:
    """`causeway project` and `serve` refuse a database not at head with one line and exit
    2; `python -m scheduler` loops for ever, printing a traceback a second."""
    env = environment(CAUSEWAY_DATABASE_URL=_url(empty_database))
    _one_line_exit_2(_run([sys.executable, "-m", "scheduler"], env, timeout_s=20))


@pytest.mark.parametrize(
    "url",
    ["postgresql://postgres@127.0.0.1:1/causeway", "SERVER/cli_no_such_database"],
)
def test_scheduler_on_a_database_it_cannot_reach_is_one_line_and_exit_2(
    server: URL, url: str
) -> None:
    """A wrong port or a database name that does not exist: every `causeway` command says
    "error: cannot use the database: ..." and exits 2; the scheduler retries for ever."""
    if url.startswith("SERVER/"):
        url = _url(server.set(database=url.removeprefix("SERVER/")))
    env = environment(CAUSEWAY_DATABASE_URL=url)
    _one_line_exit_2(_run([sys.executable, "-m", "scheduler"], env, timeout_s=20))


@pytest.mark.parametrize("argument", ["--bogus", "--help"])
def test_scheduler_does_not_start_on_an_argument_it_does_not_take(
    database_url: URL, argument: str
) -> None:
    """`python -m scheduler --help` (or a typo'd option) ignores its arguments and starts
    the scheduler on the database: it leads the dispatcher and expires leases."""
    env = environment(CAUSEWAY_DATABASE_URL=_url(database_url))
    result = _run([sys.executable, "-m", "scheduler", argument], env, timeout_s=15)
    assert result.returncode in (0, 2), result.stderr


# --- causeway demo ----------------------------------------------------------------------


def _events(database_url: URL) -> int:
    with psycopg.connect(libpq_conninfo(database_url)) as conn:
        row = conn.execute("SELECT count(*) FROM events").fetchone()
    return int(row[0]) if row else 0


def _demo_env(database_url: URL, tmp_path: Path) -> dict[str, str]:
    return environment(
        CAUSEWAY_DATABASE_URL=_url(database_url),
        CAUSEWAY_DATA_DIR=str(tmp_path),
        CAUSEWAY_SCHEDULER_AUTOSCALE_INTERVAL_S="3600",
    )


@pytest.mark.parametrize("given", ["missing", "no recording"])
def test_demo_refuses_a_recording_it_cannot_replay_and_stores_nothing(
    database_url: URL, tmp_path: Path, given: str
) -> None:
    """docs/demo.md: the camera part is left out only "without the bundled file". A
    `--recording` named that does not exist (a typo) was left out, exit 0; one that is no
    recording was refused only after the whole data set was stored."""
    env = _demo_env(database_url, tmp_path)
    key = create_key(env, "default", "admin")
    recording = tmp_path / "notes.db3"
    if given == "no recording":
        recording.write_text("not a recording\n")
    with serving(env) as base:
        argv = ["demo", "--target", base, "--key", key, "--recording", str(recording)]
        result = _run([sys.executable, "-m", "app.cli", *argv], env, timeout_s=180)
    _one_line_exit_2(result)
    assert _events(database_url) == 0, "the refused demo stored events"


# --- causeway replay: an empty --format -------------------------------------------------


def test_replay_refuses_an_empty_format(database_url: URL, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--format ""` (an unset shell variable) is taken as ndjson with exit 0; any other
    value outside ndjson|parquet is refused, and so is an empty --stream or --since."""
    monkeypatch.setenv("CAUSEWAY_DATABASE_URL", _url(database_url))
    result = CliRunner().invoke(cli, ["replay", "--out", "-", "--format", ""])
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert result.stderr.startswith("error: --format must be ndjson or parquet")


# --- causeway projections rebuild on an unmigrated database ------------------------------


def test_rebuild_on_an_unmigrated_database_is_exit_2(empty_database: URL) -> None:
    """Every other command (status, skip, project, serve) says the database is not
    migrated and exits 2; `projections rebuild` says the rebuild "failed", exit 1, as if
    an event had broken the read model."""
    env = environment(CAUSEWAY_DATABASE_URL=_url(empty_database))
    result = _run([sys.executable, "-m", "app.cli", "projections", "rebuild", "drift"], env)
    _one_line_exit_2(result)
    assert "migrate" in result.stderr


# --- causeway evs ------------------------------------------------------------------------


def test_evs_replay_refuses_an_empty_classifier(tmp_path: Path) -> None:
    """`--classifier ""` runs the built-in heuristic with exit 0: the events are labelled
    by a classifier the user did not ask for (any other bad MODULE:NAME is exit 2)."""
    out = tmp_path / "events.ndjson"
    result = _run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "evs",
            "replay",
            str(RECORDING),
            "--sensor",
            "s1",
            "--out",
            str(out),
            "--classifier",
            "",
        ],
        environment(),
    )
    _one_line_exit_2(result)
    assert not out.exists()


def test_evs_drain_refuses_an_empty_spool(tmp_path: Path) -> None:
    """`--spool ""` drains the working directory: it takes it for a spool (writes a
    `lock` file into it) and says "sent 0 events; 0 bytes left in ." with exit 0."""
    result = _run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "evs",
            "drain",
            "--spool",
            "",
            "--target",
            "http://127.0.0.1:1",
            "--key",
            "k",
        ],
        environment(),
        cwd=tmp_path,
    )
    assert list(tmp_path.iterdir()) == [], "it wrote into the working directory"
    _one_line_exit_2(result)


def test_evs_mqtt_refused_topic_opens_no_spool(tmp_path: Path) -> None:
    """evs_bridge/cli/options.py: "A check that fails does so before any output is
    opened". A topic with a wildcard is refused only after the spool was made."""
    spool = tmp_path / "spool"
    result = _run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "evs",
            "mqtt",
            "--broker",
            "mqtt://127.0.0.1:1",
            "--topic",
            "sensors/#",
            "--sensor",
            "s1",
            "--target",
            "http://127.0.0.1:1",
            "--key",
            "k",
            "--spool",
            str(spool),
        ],
        environment(),
    )
    _one_line_exit_2(result)
    assert not spool.exists(), f"the refused command made {sorted(p.name for p in spool.iterdir())}"


def test_evs_mqtt_width_without_height_opens_no_spool(tmp_path: Path) -> None:
    """Refused by MqttBridge, it was refused after the spool was made and claimed."""
    spool = tmp_path / "spool"
    result = _run(
        [
            sys.executable, "-m", "app.cli", "evs", "mqtt",
            "--broker", "mqtt://127.0.0.1:1", "--topic", "sensors/cam1", "--sensor", "s1",
            "--target", "http://127.0.0.1:1", "--key", "k", "--spool", str(spool),
            "--width", "640",
        ],
        environment(),
    )  # fmt: skip
    _one_line_exit_2(result)
    assert not spool.exists(), (
        f"the refused command made {sorted(p.name for p in spool.iterdir())}: {result.stderr}"
    )
