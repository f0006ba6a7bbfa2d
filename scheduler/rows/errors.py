"""How the scheduler tells a database that is away (down, restarting, out of reach) from
a bug: the one place its loops classify the driver's and SQLAlchemy's errors."""

from __future__ import annotations

import psycopg
from sqlalchemy.exc import DBAPIError


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database could not be used just now, so a loop should log
    it briefly and try again, rather than report a failure of its own."""
    return isinstance(exc, DBAPIError | psycopg.OperationalError | OSError)
