"""What a client can put into the service's text log lines: nothing that reads as a line
of the service's own; and a client that stops reading is not a server failure."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import AsyncIterator, Iterator

import pytest
from fastapi import FastAPI
from prometheus_client import REGISTRY
from sqlalchemy import URL
from starlette.types import Message, Scope

from app.main import create_app, dispose
from app.settings import Settings
from app.telemetry import logs


@pytest.fixture
def text_log() -> Iterator[io.StringIO]:
    """The root logger as ``causeway serve`` has it under CAUSEWAY_LOG_FORMAT=text."""
    sink = io.StringIO()
    handler = logging.StreamHandler(sink)
    handler.setFormatter(logs.TextFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    old = root.level
    root.setLevel(logging.INFO)
    try:
        yield sink
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


@pytest.fixture
async def quick_send_app(settings: Settings, database_url: URL) -> AsyncIterator[FastAPI]:
    app = create_app(settings.model_copy(update={"send_timeout_s": 0.1}), database_url=database_url)
    yield app
    await dispose(app)


async def test_a_path_with_an_encoded_newline_forges_no_log_line(
    quick_send_app: FastAPI, text_log: io.StringIO
) -> None:
    # What uvicorn hands the app for GET /x%0ACRITICAL%20app.store.verify:%20... :
    # scope["path"] is percent-decoded, so it holds a real newline.
    forged = "CRITICAL app.store.verify: hash chain broken at position 1"
    path = "/x\n" + forged + " #"
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": b"/x%0A" + forged.replace(" ", "%20").encode() + b"%20%23",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"causeway")],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }

    async def receive() -> Message:
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:  # a client that takes no byte of its answer
        await asyncio.sleep(3600)

    async with asyncio.timeout(10):
        await quick_send_app(scope, receive, send)
    written = text_log.getvalue().splitlines()
    # Every line the service wrote is its own: none starts with a client's text.
    assert not any(line.startswith("CRITICAL app.store.verify") for line in written), written
    assert any("/x\\nCRITICAL app.store.verify" in line for line in written), written


def _scope(method: str, path: str, headers: list[tuple[bytes, bytes]] | None = None) -> Scope:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"causeway"), *(headers or [])],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }


async def test_a_client_that_stops_reading_is_no_unexpected_error(
    quick_send_app: FastAPI, text_log: io.StringIO
) -> None:
    def count(status: str) -> float:
        labels = {"route": "/healthz", "method": "GET", "status": status}
        found = REGISTRY.get_sample_value("causeway_http_request_duration_seconds_count", labels)
        return found or 0.0

    before = {s: count(s) for s in ("2xx", "5xx")}
    sent: list[Message] = []

    async def receive() -> Message:
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)
        if message["type"] == "http.response.body":  # took the head, then stopped reading
            await asyncio.sleep(3600)

    async with asyncio.timeout(10):
        await quick_send_app(_scope("GET", "/healthz"), receive, send)
    assert sent[0]["status"] == 200  # what the client was answered
    after = {s: count(s) - before[s] for s in ("2xx", "5xx")}
    # The client got a 200 head and stopped reading: no server error happened.
    assert after == {"2xx": 1, "5xx": 0}, after
    assert "unexpected error" not in text_log.getvalue()  # was an ERROR with a traceback
    assert "took no byte of its answer to GET /healthz" in text_log.getvalue()
