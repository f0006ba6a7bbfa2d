"""The ``causeway`` command against a real database: keys, verify, replay, migrate."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import psycopg
import pyarrow.parquet as pq
import pytest
from sqlalchemy import URL
from typer.testing import CliRunner

from app.cli import cli
from app.db.engine import create_engine
from app.store.keys import KeyStore
from app.store.log import EventLog
from app.store.records import NewEvent


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
        assert result.stdout.startswith("ok: 5 events, head ")
        assert len(result.stdout.split()[-1]) == 64

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


class TestReplay:
    def test_replay_writes_filtered_ndjson_to_a_file(
        self, run: CliRunner, database_url: URL, tmp_path: Path
    ) -> None:
        store(database_url, "acme", 6)
        out = tmp_path / "t1.ndjson"
        result = run.invoke(
            cli, ["replay", "--tenant", "acme", "--types", "t1", "--after", "2", "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
        events = [orjson.loads(line) for line in out.read_text().splitlines()]
        assert [e["id"] for e in events] == ["e3", "e5"]
        assert "wrote 2 events" in result.stderr

    def test_a_bad_time_is_exit_2(self, run: CliRunner, tmp_path: Path) -> None:
        result = run.invoke(cli, ["replay", "--since", "soon", "--out", str(tmp_path / "x")])
        assert result.exit_code == 2
        assert result.stderr.startswith("error: since:")

    def test_replay_writes_the_same_events_as_parquet(
        self, run: CliRunner, database_url: URL, tmp_path: Path
    ) -> None:
        store(database_url, "acme", 6)
        out = tmp_path / "t1.parquet"
        result = run.invoke(
            cli,
            [
                *("replay", "--tenant", "acme", "--types", "t1", "--after", "2"),
                *("--format", "parquet", "--out", str(out)),
            ],
        )
        assert result.exit_code == 0, result.output
        rows = pq.read_table(out).to_pylist()
        assert [(r["id"], orjson.loads(r["data"])) for r in rows] == [
            ("e3", {"i": 3}),
            ("e5", {"i": 5}),
        ]
        assert "wrote 2 events" in result.stderr

    def test_an_unknown_format_is_exit_2(self, run: CliRunner, tmp_path: Path) -> None:
        out = tmp_path / "x"
        result = run.invoke(cli, ["replay", "--format", "csv", "--out", str(out)])
        assert result.exit_code == 2
        assert result.stderr == "error: --format must be ndjson or parquet, not 'csv'\n"
        assert not out.exists()


def test_migrate_is_idempotent(run: CliRunner) -> None:
    result = run.invoke(cli, ["migrate"])
    assert result.exit_code == 0
    assert "schema at revision 0005" in result.stdout


def test_a_bad_database_url_is_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAUSEWAY_DATABASE_URL", "mysql://x@y/z")
    result = CliRunner().invoke(cli, ["verify"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: setting CAUSEWAY_DATABASE_URL")


class TestProjections:
    def test_status_and_rebuild(self, run: CliRunner, database_url: URL) -> None:
        store(database_url, "acme", 3)
        status = run.invoke(cli, ["projections", "status"])
        assert status.exit_code == 0, status.output
        # Nothing of the registry after the checkpoint: no lag, though the head moved.
        assert status.stdout.splitlines()[1].split()[:4] == ["model-registry", "0", "3", "0"]
        rebuilt = run.invoke(cli, ["projections", "rebuild", "model-registry"])
        assert rebuilt.exit_code == 0, rebuilt.output
        assert rebuilt.stdout.strip() == "rebuilt model-registry from 0 events"
        after = run.invoke(cli, ["projections", "status"])
        assert after.stdout.splitlines()[1].split()[:4] == ["model-registry", "3", "3", "0"]

    def test_rebuilding_an_unknown_projection_is_exit_2(self, run: CliRunner) -> None:
        result = run.invoke(cli, ["projections", "rebuild", "nope"])
        assert result.exit_code == 2
        assert result.stderr.startswith("error: no projection 'nope'")
