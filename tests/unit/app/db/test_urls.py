"""Database URLs keep their password on the way to the driver (str() of a URL masks it)."""

from __future__ import annotations

from sqlalchemy import make_url

from app.db.engine import async_url
from app.db.schema import sync_url

SECRET = "postgresql://causeway:s3cret@db.internal:5432/causeway"


def test_a_url_object_keeps_its_password() -> None:
    assert async_url(make_url(SECRET)).password == "s3cret"
    assert sync_url(make_url(SECRET)).password == "s3cret"


def test_any_driver_becomes_psycopg() -> None:
    assert async_url(SECRET).drivername == "postgresql+psycopg"
    assert async_url("postgresql+asyncpg://u@h/d").drivername == "postgresql+psycopg"
