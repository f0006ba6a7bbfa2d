"""What a superuser writes past the store (triggers off) in shapes the store never writes
is a break ``causeway verify`` names, one line and exit 1: extensions that are an array
(``dict()`` of an array of pairs is the very object that was hashed, while readers serve
the array), a string, a timestamp Python cannot hold."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from sqlalchemy import URL
from typer.testing import CliRunner

from app.cli import cli
from app.db.engine import create_engine
from app.store.log import EventLog
from app.store.records import NewEvent


@pytest.fixture
def run(database_url: URL, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("CAUSEWAY_DATABASE_URL", database_url.render_as_string(hide_password=False))
    return CliRunner()


def libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def store(database_url: URL) -> None:
    async def go() -> None:
        engine = create_engine(database_url, pool_size=1)
        async with engine.begin() as conn:
            await EventLog(conn).append(
                "acme",
                [
                    NewEvent(id="plain", source="/s", type="t", stream="s"),
                    NewEvent(
                        id="ext", source="/s", type="t", stream="s", extensions={"priority": 3}
                    ),
                    NewEvent(id="last", source="/s", type="t", stream="s"),
                ],
            )
        await engine.dispose()

    asyncio.run(go())


def forge(database_url: URL, position: int, extensions: str) -> None:
    with psycopg.connect(libpq(database_url), autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # no trigger fires
        conn.execute(
            "UPDATE events SET extensions = %s::jsonb WHERE position = %s",
            (extensions, position),
        )


@pytest.mark.parametrize(
    ("position", "extensions"),
    [(1, "[]"), (2, '[["priority", 3]]')],
    ids=["empty-array-for-no-extensions", "array-of-pairs-for-the-object"],
)
def test_an_array_of_extensions_is_a_changed_event(
    run: CliRunner, database_url: URL, position: int, extensions: str
) -> None:
    store(database_url)
    assert run.invoke(cli, ["verify"]).exit_code == 0
    forge(database_url, position, extensions)
    result = run.invoke(cli, ["verify"])
    assert result.exit_code == 1, result.stdout
    assert f"position {position}" in result.stderr


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE events SET extensions = '\"x\"' WHERE position = 2",
        "UPDATE events SET recorded_at = 'infinity' WHERE position = 2",
        "UPDATE events SET time = '-infinity' WHERE position = 2",
        # A number past a double: jsonb keeps it, orjson cannot read it.
        """UPDATE events SET extensions = '{"priority": 1e400}' WHERE position = 2""",
        """UPDATE events SET data = '{"n": 1e400}' WHERE position = 2""",
    ],
    ids=[
        "extensions-a-string",
        "recorded_at-infinity",
        "time-minus-infinity",
        "extensions-past-a-double",
        "data-past-a-double",
    ],
)
def test_an_edit_verify_cannot_read_is_named_not_a_traceback(
    run: CliRunner, database_url: URL, edit: str
) -> None:
    """What the forger wrote is reported like every other break: one line naming the
    event, exit 1 (not a ``ValueError`` from ``dict()``, or psycopg's ``DataError`` for a
    timestamp Python cannot hold, as a traceback)."""
    store(database_url)
    with psycopg.connect(libpq(database_url), autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # no trigger fires
        conn.execute(edit)
    result = run.invoke(cli, ["verify"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 1
    assert result.stderr.startswith("error: hash chain broken at position 2: "), result.stderr
    assert result.stderr.count("\n") == 1
