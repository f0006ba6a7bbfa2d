"""The producer client's reading of refusals: whatever body a gateway sends, a refusal is a
CausewayError the caller can act on (the edge bridge spools on a 5xx)."""

from __future__ import annotations

import httpx2
import pytest

from ingest.client import CausewayError, _raise_for_problem


@pytest.mark.parametrize(
    "response",
    [
        httpx2.Response(504, json="upstream timed out"),
        httpx2.Response(502, json=["bad", "gateway"]),
        httpx2.Response(503, text="<html>down</html>"),
    ],
)
def test_a_body_that_is_no_problem_is_still_a_causeway_error(response: httpx2.Response) -> None:
    with pytest.raises(CausewayError) as refused:
        _raise_for_problem(response)
    assert refused.value.status == response.status_code
    assert refused.value.problem["detail"] == response.text


def test_a_problem_is_kept_as_sent() -> None:
    problem = {"type": "/problems/unauthenticated", "detail": "bad key"}
    with pytest.raises(CausewayError) as refused:
        _raise_for_problem(httpx2.Response(401, json=problem))
    assert refused.value.problem == problem
