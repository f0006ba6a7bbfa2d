"""Database URLs keep their password on the way to the driver (str() of a URL masks it),
and reach psycopg itself whatever their password holds."""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import make_url

from app.db.engine import CONNECT_TIMEOUT_S, async_url, libpq_conninfo
from app.db.schema import sync_url

SECRET = "postgresql://causeway:s3cret@db.internal:5432/causeway"


def test_a_url_object_keeps_its_password() -> None:
    assert async_url(make_url(SECRET)).password == "s3cret"
    assert sync_url(make_url(SECRET)).password == "s3cret"


def test_any_driver_becomes_psycopg() -> None:
    assert async_url(SECRET).drivername == "postgresql+psycopg"
    assert async_url("postgresql+asyncpg://u@h/d").drivername == "postgresql+psycopg"


def test_psycopg_itself_gets_every_part_of_a_url_quoted() -> None:
    """A rendered URL keeps a space in a password as it is, which libpq refuses."""
    url = "postgresql+psycopg://causeway:s3 cr'et@db.internal:5433/causeway?sslmode=require"
    assert conninfo_to_dict(libpq_conninfo(url)) == {
        "user": "causeway",
        "password": "s3 cr'et",
        "host": "db.internal",
        "port": "5433",
        "dbname": "causeway",
        "sslmode": "require",
        "connect_timeout": "10",
    }


def test_a_socket_directory_in_the_query_reaches_psycopg() -> None:
    assert conninfo_to_dict(libpq_conninfo("postgresql://postgres@/causeway?host=/run/pg")) == {
        "user": "postgres",
        "dbname": "causeway",
        "host": "/run/pg",
        "connect_timeout": "10",
    }


def test_every_connection_gives_up_on_a_silent_host_unless_the_url_says_how_soon() -> None:
    """libpq waits for ever on a host that takes the connection and never answers."""
    assert CONNECT_TIMEOUT_S == 10
    for url in (async_url(SECRET), sync_url(SECRET)):
        assert url.query["connect_timeout"] == "10"
    assert conninfo_to_dict(libpq_conninfo(SECRET))["connect_timeout"] == "10"
    given = f"{SECRET}?connect_timeout=3"
    assert async_url(given).query["connect_timeout"] == "3"
    assert sync_url(given).query["connect_timeout"] == "3"
    assert conninfo_to_dict(libpq_conninfo(given))["connect_timeout"] == "3"
