"""The ``causeway`` command against a real database: keys, verify, replay, migrate."""

from __future__ import annotations

import asyncio
import os
import re
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import URL
from typer.testing import CliRunner, Result

from app.cli import cli
from app.db.engine import create_engine
from app.store.keys import KeyStore
from app.store.log import EventLog
from app.store.model_registry import Signature, registration_event
from app.store.records import NewEvent
from tests.integration.forgery import cut_tail, rewrite
from tests.integration.process import environment


@pytest.fixture
def run(database_url: URL, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("CAUSEWAY_DATABASE_URL", database_url.render_as_string(hide_password=False))
    return CliRunner()


def store(database_url: URL, tenant: str, count: int) -> None:
    async def go() -> None:
        engine = create_engine(database_url, pool_size=1)
        async with engine.begin() as conn:
            await EventLog(conn).append(
                tenant,
                [
                    NewEvent(
                        id=f"e{i}",
                        source="/s",
                        type=f"t{i % 2}",
                        stream="s",
                        has_data=True,
                        data={"i": i},
                    )
                    for i in range(count)
                ],
            )
        await engine.dispose()

    asyncio.run(go())


def libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


class TestKeys:
    def test_create_prints_a_working_key_once_and_revoke_disables_it(
        self, run: CliRunner, database_url: URL
    ) -> None:
        created = run.invoke(cli, ["keys", "create", "--tenant", "acme", "--scopes", "ingest,read"])
        assert created.exit_code == 0, created.output
        key = created.stdout.strip()
        assert key.startswith("cw_")

        async def authenticate() -> object:
            engine = create_engine(database_url, pool_size=1)
            async with engine.connect() as conn:
                found = await KeyStore(conn).authenticate(key)
            await engine.dispose()
            return found

        principal = asyncio.run(authenticate())
        assert principal is not None
        revoked = run.invoke(cli, ["keys", "revoke", key.split("_")[1]])
        assert revoked.exit_code == 0
        assert asyncio.run(authenticate()) is None

    def test_unknown_scopes_are_a_one_line_error_with_exit_2(self, run: CliRunner) -> None:
        result = run.invoke(cli, ["keys", "create", "--tenant", "acme", "--scopes", "root"])
        assert result.exit_code == 2
        assert result.stderr.startswith("error: scopes must be")
        assert result.stderr.count("\n") == 1

    def test_revoking_an_unknown_key_is_exit_2(self, run: CliRunner) -> None:
        result = run.invoke(cli, ["keys", "revoke", "000000000000"])
        assert result.exit_code == 2
        assert "no active key" in result.stderr


class TestVerify:
    def test_an_intact_chain_prints_the_count_and_head(
        self, run: CliRunner, database_url: URL
    ) -> None:
        store(database_url, "acme", 5)
        result = run.invoke(cli, ["verify"])
        assert result.exit_code == 0
        ok, anchor = result.stdout.splitlines()
        assert ok.startswith("ok: 5 events, head ")
        head = ok.split()[-1]
        assert len(head) == 64
        assert anchor == f"anchor: 5:{head}"

    def test_a_tampered_row_is_named_and_exits_1(self, run: CliRunner, database_url: URL) -> None:
        store(database_url, "acme", 5)
        with psycopg.connect(libpq(database_url), autocommit=True) as conn:
            conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
            conn.execute("""UPDATE events SET data = '{"i": 99}' WHERE position = 4""")
            conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
        result = run.invoke(cli, ["verify"])
        assert result.exit_code == 1
        assert result.stderr.strip() == (
            "error: hash chain broken at position 4: hash does not match the content"
        )

    def test_a_rewritten_tail_passes_alone_but_not_against_an_earlier_head(
        self, run: CliRunner, database_url: URL
    ) -> None:
        """A forger who rewrites the newest event, its hash and the log head leaves a chain
        that checks out; the head printed before the rewrite, kept elsewhere, does not."""
        store(database_url, "acme", 5)
        first = run.invoke(cli, ["verify"])
        anchor = first.stdout.split()[-1]  # the line verify prints to keep
        assert anchor.startswith("5:")
        assert run.invoke(cli, ["verify", "--anchor", anchor]).exit_code == 0
        rewrite(database_url, 5, {"i": 99}, move_head=True)
        assert run.invoke(cli, ["verify"]).exit_code == 0
        result = run.invoke(cli, ["verify", "--anchor", anchor])
        assert result.exit_code == 1
        assert result.stderr.strip() == (
            "error: hash chain broken at position 5: hash differs from the anchor"
        )

    def test_an_anchor_past_the_end_of_the_log_fails(
        self, run: CliRunner, database_url: URL
    ) -> None:
        store(database_url, "acme", 2)
        result = run.invoke(cli, ["verify", "--anchor", f"3:{'ab' * 32}"])
        assert result.exit_code == 1
        assert result.stderr.strip() == (
            "error: hash chain broken at the log head: the log ends before the anchor at position 3"
        )

    @pytest.mark.parametrize(
        "anchor",
        [
            "5",
            "0:" + "ab" * 32,
            "x:" + "ab" * 32,
            "²:" + "ab" * 32,  # a digit to str.isdigit(), not to int()
            "9" * 5000 + ":" + "ab" * 32,  # past the digits int() reads
            "5:" + "zz" * 32,
            "5:" + "ab" * 15 + "  " + "ab" * 16,  # 64 characters, 31 bytes to bytes.fromhex
        ],
    )
    def test_a_malformed_anchor_is_a_one_line_error_with_exit_2(
        self, run: CliRunner, anchor: str
    ) -> None:
        result = run.invoke(cli, ["verify", "--anchor", anchor])
        assert result.exit_code == 2
        assert result.stderr == (
            f"error: --anchor takes POSITION:HASH (a position and 64 hex digits), not {anchor!r}\n"
        )


class TestAnchor:
    def test_each_run_appends_the_head_and_verify_checks_every_line(
        self, run: CliRunner, database_url: URL, tmp_path: Path
    ) -> None:
        journal = tmp_path / "anchors.log"
        store(database_url, "acme", 3)
        assert run.invoke(cli, ["anchor", str(journal)]).exit_code == 0
        store(database_url, "other", 2)
        appended = run.invoke(cli, ["anchor", str(journal)])
        assert appended.exit_code == 0, appended.output
        lines = journal.read_text().splitlines()
        assert [line.split(":")[0] for line in lines] == ["3", "5"]
        assert appended.stdout.startswith(f"anchor: {lines[1].split()[0]} appended to ")
        result = run.invoke(cli, ["verify", "--anchors", str(journal)])
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith("ok: 5 events")

    def test_a_tail_cut_by_the_superuser_passes_alone_but_not_against_the_anchors(
        self, run: CliRunner, database_url: URL, tmp_path: Path
    ) -> None:
        """Deleting the newest events (and moving the log head back) leaves a chain that
        checks out; the head appended to the journal before the cut does not."""
        journal = tmp_path / "anchors.log"
        store(database_url, "acme", 5)
        assert run.invoke(cli, ["anchor", str(journal)]).exit_code == 0
        cut_tail(database_url, keep=3)
        assert run.invoke(cli, ["verify"]).exit_code == 0
        result = run.invoke(cli, ["verify", "--anchors", str(journal)])
        assert result.exit_code == 1
        assert result.stderr.strip() == (
            "error: hash chain broken at the log head: the log ends before the anchor at position 5"
        )

    def test_an_empty_log_appends_nothing(self, run: CliRunner, tmp_path: Path) -> None:
        result = run.invoke(cli, ["anchor", str(tmp_path / "anchors.log")])
        assert result.exit_code == 0
        assert result.stdout == "the log is empty: nothing to anchor\n"
        assert not (tmp_path / "anchors.log").exists()

    def test_a_bad_line_or_file_is_a_one_line_error_with_exit_2(
        self, run: CliRunner, database_url: URL, tmp_path: Path
    ) -> None:
        journal = tmp_path / "anchors.log"
        journal.write_text(
            f"# kept on the audit host\n7:{'0' * 64} 2026-12-05T00:00:00+00:00\n7:x\n"
        )
        result = run.invoke(cli, ["verify", "--anchors", str(journal)])
        assert result.exit_code == 2
        assert result.stderr == (
            f"error: {journal} line 3 takes POSITION:HASH (a position and 64 hex digits), not '7:x'\n"
        )
        missing = run.invoke(cli, ["verify", "--anchors", str(tmp_path / "nosuch")])
        assert missing.exit_code == 2
        assert missing.stderr.startswith("error: --anchors ")
        assert missing.stderr.count("\n") == 1
        store(database_url, "acme", 1)
        unwritable = run.invoke(cli, ["anchor", str(tmp_path / "no" / "such")])
        assert unwritable.exit_code == 2
        assert (
            unwritable.stderr
            == f"error: cannot append to {tmp_path}/no/such: No such file or directory\n"
        )


class TestProjectionSkips:
    def test_an_operator_skips_the_event_a_projection_is_stopped_at_and_takes_it_back(
        self, run: CliRunner, database_url: URL
    ) -> None:
        store(database_url, "acme", 3)
        with psycopg.connect(libpq(database_url), autocommit=True) as conn:
            conn.execute(
                "INSERT INTO projection_checkpoints (name, position, last_error, error_position,"
                " failures) VALUES ('model-registry', 1, 'KeyError: x', 2, 4)"
            )
        refusals = [
            (["skip", "model-registry", "3", "--reason", "r"], "is stopped at 2"),
            (["skip", "model-registry", "²", "--reason", "r"], "a position is a whole number"),
            (["skip", "model-registry", "2", "--reason", " "], "say why"),
            (["skip", "nosuch", "2", "--reason", "r"], "no projection 'nosuch'"),
            (["unskip", "model-registry", "2"], "skips no event at position 2"),
        ]
        for argv, message in refusals:
            result = run.invoke(cli, ["projections", *argv])
            assert result.exit_code == 2, (argv, result.output)
            assert message in result.stderr, result.stderr
            assert result.stderr.count("\n") == 1, result.stderr
        skipped = run.invoke(
            cli, ["projections", "skip", "model-registry", "2", "--reason", "poison"]
        )
        assert skipped.exit_code == 0, skipped.output
        assert "model-registry skips position 2 (KeyError: x)" in skipped.stdout
        status = run.invoke(cli, ["projections", "status"]).stdout
        assert "model-registry skips 2 since " in status
        assert status.rstrip().endswith(": poison (it failed with KeyError: x)")
        taken_back = run.invoke(cli, ["projections", "unskip", "model-registry", "2"])
        assert taken_back.exit_code == 0, taken_back.output
        assert "skips" not in run.invoke(cli, ["projections", "status"]).stdout


def register_and_refuse(database_url: URL, *, projected: bool = False) -> None:
    """A model registration in the log, then a trigger that refuses every row of
    ``model_versions`` (code that now refuses an event it once applied); ``projected``:
    once the registration is in the read model."""
    signature = Signature.model_validate({"inputs": [{"type": "binary"}], "outputs": []})
    registration = registration_event("faces", "3", signature, {}, enforce_outputs=False)

    async def register() -> None:
        engine = create_engine(database_url, pool_size=1)
        async with engine.begin() as conn:
            await EventLog(conn).append("acme", [registration])
        await engine.dispose()

    asyncio.run(register())
    with psycopg.connect(libpq(database_url), autocommit=True) as conn:
        deadline = time.monotonic() + 30
        while projected and not conn.execute("SELECT 1 FROM model_versions").fetchone():
            assert time.monotonic() < deadline, "the runner did not apply the registration"
            time.sleep(0.1)
        conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'refused'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON model_versions"
            " FOR EACH ROW EXECUTE FUNCTION refuse()"
        )


def failed_position(failed: Result) -> str:
    """The position a failed rebuild names, checking it said so in one line."""
    assert failed.exit_code == 1
    assert failed.stderr.count("\n") == 1, failed.stderr
    found = re.search(r"failed at position (\d+) \(", failed.stderr)
    assert found is not None, failed.stderr
    assert f"causeway projections skip model-registry {found.group(1)}" in failed.stderr
    return found.group(1)


class TestProjectionRebuild:
    def test_an_event_the_rebuild_fails_on_is_one_line_and_can_be_skipped(
        self, run: CliRunner, database_url: URL
    ) -> None:
        """With no runner leading, the command rebuilds itself: a failure was a traceback
        and was not recorded, so ``skip`` refused the event too."""
        register_and_refuse(database_url)
        at = failed_position(run.invoke(cli, ["projections", "rebuild", "model-registry"]))
        # PostgreSQL's error has a CONTEXT line: the table keeps a row to a projection.
        status = run.invoke(cli, ["projections", "status"]).stdout.splitlines()
        assert all(line.split()[1].isdigit() for line in status[1:])  # each a projection's
        [row] = [line for line in status if line.startswith("model-registry ")]
        assert f"at {at}: " in row
        assert "refused" in row
        skip = ["projections", "skip", "model-registry", at, "--reason", "refused"]
        assert run.invoke(cli, skip).exit_code == 0
        rebuilt = run.invoke(cli, ["projections", "rebuild", "model-registry"])
        assert rebuilt.exit_code == 0, rebuilt.output

    def test_a_leaders_failed_rebuild_ends_the_wait(
        self, run: CliRunner, database_url: URL
    ) -> None:
        """The command used to wait out its whole timeout (600 s) in silence."""
        url = database_url.render_as_string(hide_password=False)
        leader = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "project"],
            env=environment(CAUSEWAY_DATABASE_URL=url, CAUSEWAY_PROJECTION_POLL_INTERVAL_S="0.1"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            register_and_refuse(database_url, projected=True)
            started = time.monotonic()
            argv = ["projections", "rebuild", "model-registry", "--timeout-s", "60"]
            failed_position(run.invoke(cli, argv))
            assert time.monotonic() - started < 30
        finally:
            leader.terminate()
            leader.wait(timeout=30)


class TestReplayFilters:
    def test_types_may_be_repeated(self, run: CliRunner, database_url: URL, tmp_path: Any) -> None:
        store(database_url, "acme", 4)
        out = tmp_path / "both.ndjson"
        argv = ["replay", "--tenant", "acme", "--out", str(out), "--types", "t0", "--types", "t1"]
        assert run.invoke(cli, argv).exit_code == 0
        assert out.read_bytes().count(b"\n") == 4  # both types, not the last one given

    @pytest.mark.parametrize(
        "argv",
        [
            ["replay", "--out", "-", "--types", "\udcff"],
            ["replay", "--out", "-", "--tenant", "\udcff"],
            ["replay", "--out", "-", "--correlationid", "a\udcff"],
            ["keys", "revoke", "\udcff"],
            ["keys", "create", "--tenant", "acme", "--scopes", "read", "--description", "\udcff"],
        ],
    )
    def test_text_that_is_not_utf8_is_a_usage_error(self, run: CliRunner, argv: list[str]) -> None:
        """Bytes that are not UTF-8 on the command line (kept by Python as lone
        surrogates) were a traceback from the driver."""
        refused = run.invoke(cli, argv)
        assert refused.exit_code == 2
        assert "is not valid UTF-8 text" in refused.stderr


class TestReplayOutput:
    def test_a_failed_replay_leaves_an_earlier_export_as_it_was(
        self, run: CliRunner, database_url: URL, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        store(database_url, "acme", 3)
        out = tmp_path / "acme.ndjson"
        assert run.invoke(cli, ["replay", "--tenant", "acme", "--out", str(out)]).exit_code == 0
        exported = out.read_bytes()
        assert exported.count(b"\n") == 3
        monkeypatch.setenv("CAUSEWAY_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
        failed = run.invoke(cli, ["replay", "--tenant", "acme", "--out", str(out)])
        assert failed.exit_code != 0
        assert out.read_bytes() == exported
        assert sorted(p.name for p in tmp_path.iterdir()) == ["acme.ndjson"]

    @pytest.mark.parametrize("form", ["ndjson", "parquet"])
    def test_a_full_disk_is_one_line(self, run: CliRunner, database_url: URL, form: str) -> None:
        # What is buffered is written at the close, which a full disk refuses too: that
        # was a traceback.
        store(database_url, "acme", 1)
        argv = ["replay", "--tenant", "acme", "--out", "/dev/full", "--format", form]
        failed = run.invoke(cli, argv)
        assert failed.exit_code == 1
        assert failed.stderr == "error: writing the replay: No space left on device\n"

    def test_a_file_keeps_its_permissions(
        self, run: CliRunner, database_url: URL, tmp_path: Any
    ) -> None:
        store(database_url, "acme", 2)
        out = tmp_path / "private.ndjson"
        out.write_bytes(b"old\n")
        out.chmod(0o600)
        assert run.invoke(cli, ["replay", "--tenant", "acme", "--out", str(out)]).exit_code == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
        assert out.read_bytes().count(b"\n") == 2

    def test_a_symlink_keeps_pointing_at_the_export(
        self, run: CliRunner, database_url: URL, tmp_path: Any
    ) -> None:
        store(database_url, "acme", 2)
        (tmp_path / "real").mkdir()
        real = tmp_path / "real" / "export.ndjson"
        real.write_bytes(b"old\n")
        link = tmp_path / "link.ndjson"
        link.symlink_to(real)
        assert run.invoke(cli, ["replay", "--tenant", "acme", "--out", str(link)]).exit_code == 0
        assert link.is_symlink()
        assert real.read_bytes().count(b"\n") == 2

    def test_a_pipe_is_written_through(
        self, run: CliRunner, database_url: URL, tmp_path: Any
    ) -> None:
        store(database_url, "acme", 2)
        fifo = tmp_path / "events.fifo"
        os.mkfifo(fifo)
        read: list[bytes] = []
        reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()))
        reader.start()
        result = run.invoke(cli, ["replay", "--tenant", "acme", "--out", str(fifo)])
        reader.join(30)
        assert result.exit_code == 0, result.output
        assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still a pipe, not a file put there
        assert read[0].count(b"\n") == 2

    @pytest.mark.parametrize("target", ["missing/dir/x.ndjson", "."])
    def test_an_unwritable_out_is_one_line_and_exit_2(
        self, run: CliRunner, tmp_path: Any, target: str
    ) -> None:
        out = tmp_path / target
        result = run.invoke(cli, ["replay", "--out", str(out)])
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"error: --out {out}: ")
        assert result.stderr.count("\n") == 1
