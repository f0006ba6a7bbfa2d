"""``CAUSEWAY_LOG_FORMAT=json``: every line ``causeway serve`` writes is a JSON object,
its worker processes' lines included, and a request's lines carry its id; and so are the
lines of the projection runner run alone."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import orjson
from sqlalchemy import URL

from tests.integration.events import STRUCTURED, event
from tests.integration.process import create_key, environment, serving


def test_json_logs_of_two_workers_carry_the_request_id_and_tenant(
    database_url: URL, tmp_path: Path
) -> None:
    env = environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
        CAUSEWAY_LOG_FORMAT="json",
        CAUSEWAY_ACCESS_LOG="true",
    )
    key = create_key(env, "t", "ingest")
    output = tmp_path / "serve.log"
    with serving(env, "--workers", "2", output=output) as base:
        posted = httpx2.post(
            f"{base}/events",
            content=orjson.dumps(event()),
            headers={**STRUCTURED, "Authorization": f"Bearer {key}", "X-Request-Id": "json-1"},
        )
        assert posted.status_code == 201
        assert posted.headers["x-request-id"] == "json-1"
        read = httpx2.get(  # a route of FastAPI's stack, not the fast path
            f"{base}/events/nothing-here",
            headers={"Authorization": f"Bearer {key}", "X-Request-Id": "json-2"},
        )
        assert (read.status_code, read.headers["x-request-id"]) == (403, "json-2")
        # The first worker to answer does not wait for the second's start-up line.
        deadline = time.monotonic() + 30
        while output.read_text().count("Started server process") < 2:
            assert time.monotonic() < deadline, "the second worker never started"
            time.sleep(0.1)
    lines = [orjson.loads(line) for line in output.read_text().splitlines() if line.strip()]
    assert any(line["message"].startswith(f"Causeway on {base}") for line in lines)
    started = [line for line in lines if line["message"].startswith("Started server process")]
    assert len(started) == 2  # one line from each worker process
    [access] = [line for line in lines if line.get("request_id") == "json-1"]
    assert access["logger"] == "uvicorn.access"
    assert access["tenant"] == "t"
    assert '"POST /events HTTP/1.1" 201' in access["message"]
    assert {"time", "level", "logger", "message"} <= access.keys()
    [refused] = [line for line in lines if line.get("request_id") == "json-2"]
    assert refused["tenant"] == "t"
    assert '"GET /events/nothing-here HTTP/1.1" 403' in refused["message"]


def test_the_projection_runner_alone_logs_json_lines_too(database_url: URL) -> None:
    env = environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_LOG_FORMAT="json",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "project"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    lines: list[dict[str, str]] = []
    while not lines or not lines[-1]["message"].startswith("following "):  # it has started
        said = process.stderr.readline()
        assert said, "project ended before it said what it follows"
        lines.append(orjson.loads(said))
    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=30)
    lines += [orjson.loads(line) for line in rest.splitlines() if line.strip()]
    assert any(line["logger"] == "causeway" for line in lines)  # what it said it follows
    assert all({"time", "level", "logger", "message"} <= line.keys() for line in lines)
