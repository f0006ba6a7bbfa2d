"""The app's own timeouts around ASGI ``receive`` and ``send``, with a server that never
delivers: a body that stops arriving, and a client that takes no byte of its answer,
its head included. (Against a real ``causeway serve``: tests/integration/test_server_limits.py
and the replay tests in tests/integration/app/api/test_reads.py.)"""

from __future__ import annotations

import asyncio

import pytest
from starlette.types import Message, Receive, Scope, Send

from app.errors import BodyTimeout
from app.web.timeouts import SendTimedOut, Timeouts

SCOPE: Scope = {"type": "http", "method": "POST", "path": "/events", "headers": []}


async def never() -> Message:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


class Sink:
    """A server whose client stops reading after ``accepted`` messages."""

    def __init__(self, accepted: int) -> None:
        self.accepted = accepted
        self.sent: list[Message] = []
        self.attempts = 0

    async def __call__(self, message: Message) -> None:
        self.attempts += 1
        if len(self.sent) >= self.accepted:
            await asyncio.Event().wait()
        self.sent.append(message)


async def test_a_body_that_stops_arriving_fails_the_request_with_body_timeout() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        first = await receive()
        assert first["more_body"]
        await receive()  # the rest never comes

    pieces = iter([{"type": "http.request", "body": b"{", "more_body": True}])

    async def receive() -> Message:
        return next(pieces, None) or await never()

    with pytest.raises(BodyTimeout):
        await Timeouts(app, body_timeout_s=0.05, send_timeout_s=5)(SCOPE, receive, Sink(9))


async def test_a_head_the_client_does_not_take_ends_the_request_and_no_later_send_waits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """uvicorn holds the head's ``send`` too while the connection is paused (a client that
    pipelines and reads nothing): that write is timed like the body's, and an error page
    sent after it does not wait out the time again."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        finally:
            with pytest.raises(SendTimedOut):
                await send({"type": "http.response.start", "status": 500, "headers": []})

    sink = Sink(accepted=0)
    async with asyncio.timeout(2):  # one timeout of 0.05 s, not two, nor a hang
        await Timeouts(app, body_timeout_s=5, send_timeout_s=0.05)(SCOPE, never, sink)
    assert sink.attempts == 1
    assert "took no byte of its answer to POST /events" in caplog.text


async def test_a_reader_that_keeps_reading_is_served_to_the_end() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for n in range(3):
            await send({"type": "http.response.body", "body": b"x", "more_body": n < 2})

    sink = Sink(accepted=4)
    await Timeouts(app, body_timeout_s=5, send_timeout_s=0.05)(SCOPE, never, sink)
    assert [m["type"] for m in sink.sent] == ["http.response.start"] + ["http.response.body"] * 3


async def test_a_request_cancelled_from_outside_is_cancelled_not_timed_out() -> None:
    """The watch cancels only the calls it timed: a cancellation of the request's task
    by someone else (the server shutting down, say) stays a cancellation."""
    waiting = asyncio.Event()

    async def receive() -> Message:
        waiting.set()
        return await never()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()

    sink = Sink(9)
    request = asyncio.create_task(
        Timeouts(app, body_timeout_s=5, send_timeout_s=5)(SCOPE, receive, sink)
    )
    await waiting.wait()
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    # Unanswered so far, it is answered 503, try again (the server would say a bare 500).
    start, body = sink.sent
    assert (start["status"], dict(start["headers"])[b"retry-after"]) == (503, b"1")
    assert b"/problems/unavailable" in body["body"]
