"""The producer client's reading of refusals: whatever body a gateway sends, a refusal is a
CausewayError the caller can act on (the edge bridge spools on a 5xx)."""

from __future__ import annotations

import pickle

import httpx2
import pytest

from ingest.client import CausewayClient, CausewayError, _raise_for_problem


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


def _answering(answer: httpx2.Response, asked: list[httpx2.Request]) -> CausewayClient:
    """A client whose every request gets ``answer``; each request kept in ``asked``."""

    def handle(request: httpx2.Request) -> httpx2.Response:
        asked.append(request)
        return answer

    client = CausewayClient("http://causeway", "key")
    client._http = httpx2.Client(base_url="http://causeway", transport=httpx2.MockTransport(handle))
    return client


def test_a_causeway_error_survives_pickling() -> None:
    """A process pool sends a worker's exception to its parent pickled: it was made again
    from its message alone, and the pool broke (BrokenProcessPool)."""
    sent = CausewayError(503, {"detail": "busy"}, retry_after_s=2.0)
    again = pickle.loads(pickle.dumps(sent))  # noqa: S301 -- our own object, just made
    assert (again.status, again.problem, again.retry_after_s) == (503, {"detail": "busy"}, 2.0)
    assert str(again) == str(sent)


@pytest.mark.parametrize(
    ("queue", "path"),
    [("a/../b", "/queues/a%2F..%2Fb/lease"), ("q?x=1#f", "/queues/q%3Fx%3D1%23f/lease")],
)
def test_a_queue_name_is_one_path_segment(queue: str, path: str) -> None:
    """``lease("other/../qinj")`` leased from queue ``qinj``: the name was read as a
    path. It goes as one segment, which the service takes as a name, or refuses."""
    asked: list[httpx2.Request] = []
    with _answering(httpx2.Response(204), asked) as client:
        assert client.lease(queue, "w") is None
    assert asked[0].url.raw_path.decode() == path


@pytest.mark.parametrize(
    "answer",
    [
        httpx2.Response(200, text="<html>sign in</html>"),
        httpx2.Response(200, json={"something": "else"}),
        httpx2.Response(200, json=["a", "list"]),
    ],
)
def test_a_success_that_is_not_the_services_answer_is_a_causeway_error(
    answer: httpx2.Response,
) -> None:
    """A proxy's 200 page raised a JSONDecodeError or a KeyError, which ended a worker's
    run (it retries only what the service or the network answers)."""
    with _answering(answer, []) as client, pytest.raises(CausewayError) as refused:
        client.lease_many("q", "w", 10)
    assert refused.value.status == 200
    assert "not the service's" in refused.value.problem["detail"]
