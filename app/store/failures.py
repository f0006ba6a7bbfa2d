"""Driver errors in Causeway's terms: the one place that knows which SQLAlchemy and
psycopg exceptions mean "the database did not answer" and "PostgreSQL refused a value".

Every face (REST, GraphQL, the CLI, the scheduler's clock) asks ``as_app_error`` instead
of matching driver exceptions itself, so a database that is down is the same 503
``unavailable`` everywhere, and a value PostgreSQL cannot take the same 400.
"""

from __future__ import annotations

import psycopg
from psycopg.errors import QueryCanceled
from sqlalchemy.exc import DataError, DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from app.errors import AppError, BadRequest, Unavailable

BAD_VALUE = (
    "a parameter holds a value PostgreSQL cannot take (a NUL character, or a number out of range)"
)
# Not "nothing was written": the appender commits a request's events in a transaction of
# its own, so a request that failed after its append (a batch of task failures whose row
# writes then deadlocked or timed out) had written them; every write is idempotent.
UNREACHABLE = (
    "the database is unreachable or the statement timed out; retry: part of the request "
    "may have been written, and sending it again writes nothing twice"
)
PAST_LIMITS = (
    "a value is past what PostgreSQL can store or index (an attribute too long for an "
    "index entry, data nested too deep); nothing was written"
)

# A lost connection, a server that is starting or stopping, a statement or lock timeout
# (QueryCanceled is an OperationalError), and no pooled connection free in time.
_UNAVAILABLE = (OperationalError, psycopg.OperationalError, PoolTimeout)
# Class 22 of SQLSTATE: a parameter PostgreSQL cannot take. Every write path checks its
# values first, so this is a read given a NUL character or an oversized number.
_BAD_VALUE = (DataError, psycopg.DataError)
# Class 54 of SQLSTATE (program_limit_exceeded): a value past what PostgreSQL takes, such as
# an index entry over a third of a page. psycopg makes it an OperationalError, but no retry
# can succeed: it is the request's own fault, as class 22 is.
_PAST_LIMITS = psycopg.errors.ProgramLimitExceeded
# What the faces register handlers for (Starlette finds a handler along the MRO).
DRIVER_ERRORS: tuple[type[Exception], ...] = (*_UNAVAILABLE, *_BAD_VALUE)


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database did not answer (a retry may succeed)."""
    return isinstance(exc, _UNAVAILABLE) and not is_past_limits(exc)


def is_past_limits(exc: BaseException) -> bool:
    """Whether PostgreSQL refused a value past its limits (SQLSTATE class 54), whether the
    error comes wrapped by SQLAlchemy or straight from psycopg: the request's own fault."""
    cause = exc.orig if isinstance(exc, DBAPIError) else exc
    return isinstance(cause, _PAST_LIMITS)


def is_database_away(exc: BaseException) -> bool:
    """Whether a background loop (the projection runner, the scheduler's clock) should log
    ``exc`` in a line and try again: the database could not be used just now (down,
    restarting, out of reach), as opposed to a bug of its own."""
    return isinstance(exc, DBAPIError | psycopg.OperationalError | OSError)


def is_database_error(exc: BaseException) -> bool:
    """Whether ``exc`` came from the database layer at all (SQLAlchemy or psycopg)."""
    return isinstance(exc, SQLAlchemyError | psycopg.Error)


def is_pool_exhausted(exc: BaseException) -> bool:
    """Whether no pooled connection came free in time."""
    return isinstance(exc, PoolTimeout)


def is_statement_cancelled(exc: BaseException) -> bool:
    """Whether PostgreSQL stopped the statement (its ``statement_timeout``), whether the
    error comes wrapped by SQLAlchemy or straight from psycopg."""
    cause = exc.orig if isinstance(exc, DBAPIError) else exc
    return isinstance(cause, QueryCanceled)


def is_connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the session it came on is gone (lost, shut down by the server),
    rather than that one statement of it failed (a timeout, a refused value): wrapped by
    SQLAlchemy or straight from psycopg (``DriverStatement``)."""
    if isinstance(exc, DBAPIError):
        return bool(exc.connection_invalidated)
    if isinstance(exc, psycopg.InterfaceError) or type(exc) is psycopg.OperationalError:
        return True  # a closed connection used; a connection lost (no SQLSTATE)
    # Class 08: connection exceptions; 57P0x: the server shutting down, crashed, starting.
    return isinstance(exc, psycopg.Error) and (exc.sqlstate or "").startswith(("08", "57P"))


def connection_problem(exc: BaseException) -> str | None:
    """What is wrong with the database a command was given, in one line, or None for an
    error that is not about which database it is (the CLI keeps its traceback)."""
    if not isinstance(exc, DBAPIError | psycopg.Error):
        return None
    cause = exc.orig if isinstance(exc, DBAPIError) else exc
    first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    if isinstance(cause, psycopg.errors.UndefinedTable):
        return f"the database is not migrated ({first}); run `causeway migrate`"
    if isinstance(cause, psycopg.errors.InsufficientPrivilege):
        # A store migrated before this release's roles (migration 0015: a restored dump,
        # say) refuses the service's role so too.
        return (
            f"the database user may not do what this needs: {first} (a store whose schema "
            "is older than this release's is moved on by `causeway migrate`)"
        )
    # A failed connection (no server, no such database or role, a refused password) is
    # the base class itself; its subclasses (a cancelled statement, a full disk, a
    # shutdown) are about the server's state, not about which database was named.
    if type(cause) is psycopg.OperationalError or isinstance(
        cause, psycopg.errors.ConnectionTimeout
    ):
        return f"cannot use the database: {first}"
    return None


def as_app_error(exc: BaseException) -> AppError | None:
    """The ``AppError`` a driver error stands for, or None when it is none of ours to
    name (a bug: the caller logs it and answers a masked 500)."""
    if is_past_limits(exc):
        return BadRequest(PAST_LIMITS)
    if isinstance(exc, _UNAVAILABLE):
        return Unavailable(UNREACHABLE, headers={"Retry-After": "1"})
    if isinstance(exc, _BAD_VALUE):
        return BadRequest(BAD_VALUE)
    return None


def is_refusal(error: Exception) -> bool:
    """Whether ``error`` refuses a request for its own content (a 4xx): an ``AppError``
    below 500, or a value PostgreSQL refused (``as_app_error`` makes it a 400)."""
    refused = error if isinstance(error, AppError) else as_app_error(error)
    return refused is not None and refused.status < 500
