"""Driver errors named once, in the store's terms: what every face answers for a database
that did not answer, a value PostgreSQL refused, and a bug."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy.exc import DataError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from app.errors import BadRequest, Unavailable
from app.store.failures import (
    as_app_error,
    connection_problem,
    is_database_away,
    is_statement_cancelled,
)


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("SELECT 1", {}, psycopg.OperationalError("server closed")),
        psycopg.OperationalError("connection refused"),
        PoolTimeout("QueuePool limit reached"),
        psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
    ],
    ids=["wrapped", "driver", "pool", "statement-timeout"],
)
def test_a_database_that_did_not_answer_is_unavailable_with_retry_after(
    error: Exception,
) -> None:
    named = as_app_error(error)
    assert isinstance(named, Unavailable)
    assert (named.status, named.headers) == (503, {"Retry-After": "1"})
    assert "retry: part of the request may have been written" in named.detail


@pytest.mark.parametrize(
    "error",
    [
        DataError("SELECT 1", {}, psycopg.DataError("invalid byte sequence")),
        psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"),
    ],
    ids=["wrapped", "driver"],
)
def test_a_value_postgresql_refused_is_a_bad_request(error: Exception) -> None:
    named = as_app_error(error)
    assert isinstance(named, BadRequest)
    assert named.status == 400


def test_anything_else_is_not_named_and_stays_a_bug() -> None:
    assert as_app_error(RuntimeError("SELECT secret FROM internals")) is None
    assert as_app_error(psycopg.errors.UniqueViolation("duplicate key")) is None


def test_a_cancelled_statement_is_told_apart_wrapped_or_not() -> None:
    cancelled = psycopg.errors.QueryCanceled("canceling statement due to statement timeout")
    assert is_statement_cancelled(cancelled)
    assert is_statement_cancelled(OperationalError("SELECT 1", {}, cancelled))
    assert not is_statement_cancelled(psycopg.OperationalError("connection refused"))


def test_background_loops_retry_on_a_lost_database_and_a_socket_error_only() -> None:
    assert is_database_away(psycopg.OperationalError("server closed the connection"))
    assert is_database_away(ConnectionRefusedError())
    assert not is_database_away(ValueError("a bug"))


def test_the_cli_names_a_database_it_cannot_use_in_one_line() -> None:
    refused = psycopg.OperationalError('connection failed: FATAL:  role "nobody" does not exist')
    assert connection_problem(refused) == (
        'cannot use the database: connection failed: FATAL:  role "nobody" does not exist'
    )
    missing = psycopg.errors.UndefinedTable('relation "events" does not exist')
    assert connection_problem(missing) == (
        'the database is not migrated (relation "events" does not exist); run `causeway migrate`'
    )
    # A store restored from a dump older than the service's roles refuses them so: the
    # line said "permission denied" and never that a migration moves it on.
    denied = psycopg.errors.InsufficientPrivilege("permission denied for table events")
    assert "`causeway migrate`" in (connection_problem(denied) or "")
    assert connection_problem(psycopg.errors.DiskFull("no space")) is None
    assert connection_problem(RuntimeError("a bug")) is None
