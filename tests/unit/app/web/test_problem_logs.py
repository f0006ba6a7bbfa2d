"""What the log says when a request is refused with a 5xx problem: an operator's alert on
ERROR lines should fire for a server fault, not for a 503 the client is told to retry."""

from __future__ import annotations

import logging

import pytest
from graphql import GraphQLError

from app.errors import AppError, Timeout, Unavailable
from app.graphql import errors
from app.web import problems


@pytest.mark.parametrize(
    "refusal",
    [
        Unavailable("the database is unreachable", headers={"Retry-After": "1"}),
        Unavailable("4 replays are streaming already"),
        Timeout("the request took longer than 30 s"),
    ],
)
def test_a_503_is_a_warning_not_an_error(
    refusal: Unavailable, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=problems.__name__):
        answer = problems.response_for(refusal, "GET", "/readyz")
    assert answer.status_code == 503
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert refusal.detail in caplog.records[0].getMessage()


def test_a_server_fault_is_an_error(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=problems.__name__):
        answer = problems.response_for(AppError("the chain is broken"), "POST", "/events")
    assert answer.status_code == 500
    assert [r.levelno for r in caplog.records] == [logging.ERROR]


def test_graphql_logs_a_503_as_rest_does(caplog: pytest.LogCaptureFixture) -> None:
    walk_timed_out = GraphQLError("too slow", original_error=Timeout("the walk took 10 s"))
    with caplog.at_level(logging.INFO, logger=errors.__name__):
        errors.log_if_unexpected(walk_timed_out)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
