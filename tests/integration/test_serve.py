"""A real ``causeway serve`` process: on a configured database, and on the embedded one."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from pathlib import Path
from secrets import token_hex

import httpx2
import orjson
import psycopg
import pytest
from sqlalchemy import URL

from app.db.schema import head_revision
from tests.conftest import janitor
from tests.integration.events import STRUCTURED, event, registration
from tests.integration.process import create_key, environment, free_port, serving


def test_serve_on_a_configured_database(database_url: URL, tmp_path: Path) -> None:
    url = database_url.render_as_string(hide_password=False)
    key = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "keys",
            "create",
            "--tenant",
            "t",
            "--scopes",
            "ingest,read",
        ],
        env=environment(CAUSEWAY_DATABASE_URL=url),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with serving(environment(CAUSEWAY_DATABASE_URL=url, CAUSEWAY_DATA_DIR=str(tmp_path))) as base:
        auth = {"Authorization": f"Bearer {key}"}
        sent = event()
        posted = httpx2.post(
            f"{base}/events", content=orjson.dumps(sent), headers={**STRUCTURED, **auth}
        )
        assert posted.status_code == 201
        assert httpx2.get(f"{base}/events/{sent['id']}", headers=auth).json()["position"] == 1
        assert httpx2.get(f"{base}/readyz").status_code == 200


def test_serve_refuses_a_database_below_head_unless_told_to_migrate(
    server: URL, tmp_path: Path
) -> None:
    name = f"causeway_blank_{token_hex(4)}"
    with janitor(server, name):
        url = server.set(database=name).render_as_string(hide_password=False)
        env = environment(CAUSEWAY_DATABASE_URL=url, CAUSEWAY_DATA_DIR=str(tmp_path))
        refused = subprocess.run(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(free_port())],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode == 2
        # One line, as every refusal (Alembic's INFO lines on its dialect came first).
        [line] = refused.stderr.strip().splitlines()
        assert f"at revision None, not {head_revision()};" in line
        assert "--migrate" in line
        with serving(env, "--migrate") as base:
            assert httpx2.get(f"{base}/readyz").status_code == 200


@pytest.mark.parametrize(
    "argv", [["serve", "--port", "1"], ["serve", "--port", "1", "--migrate"], ["migrate"]]
)
def test_a_schema_newer_than_this_release_is_one_line_everywhere(
    database_url: URL, tmp_path: Path, argv: list[str]
) -> None:
    """A dump of a newer release restored under this one: serve said "run `causeway
    migrate`", and migrate (and serve --migrate) answered Alembic's "Can't locate
    revision" as a traceback, exit 1."""
    with psycopg.connect(
        database_url.set(drivername="postgresql").render_as_string(hide_password=False),
        autocommit=True,
    ) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099'")
    url = database_url.render_as_string(hide_password=False)
    env = environment(CAUSEWAY_DATABASE_URL=url, CAUSEWAY_DATA_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr[-400:]
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    line = lines[-1]
    if argv == ["serve", "--port", "1"]:  # a look at the revision says nothing more
        assert lines == [line]
    assert line.startswith("error: the database schema is at revision 0099, which this "), line
    assert "does not know" in line


def test_embedded_mode_bootstraps_a_key_and_keeps_data_across_restarts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = environment(CAUSEWAY_DATA_DIR=str(data))
    sent = event()
    with serving(env, output=tmp_path / "serve.log") as base:
        key = (data / "admin.key").read_text().strip()
        # The first lines say where it answers, the key and where the data is; PostgreSQL's
        # start-up went to its log file.
        first = (tmp_path / "serve.log").read_text().splitlines()[:3]
        assert first == [
            f"Causeway on {base}  (the explorer at {base}/ui/, GraphiQL at {base}/graphql)",
            f"admin key for tenant 'default': {key} (kept in {data / 'admin.key'})",
            f"data: {data / 'pg'} (embedded PostgreSQL; its log: {data / 'postgres.log'})",
        ]
        assert "initdb" in (data / "postgres.log").read_text()
        assert (data / "address").read_text() == f"{base}\n"
        auth = {"Authorization": f"Bearer {key}"}
        posted = httpx2.post(
            f"{base}/events", content=orjson.dumps(sent), headers={**STRUCTURED, **auth}
        )
        assert posted.status_code == 201
    # serving() ended it with SIGTERM, as a process manager would: PostgreSQL stopped too
    assert not (data / "pg" / "postmaster.pid").exists()
    with serving(env) as base:
        stored = httpx2.get(f"{base}/events/{sent['id']}", headers=auth)
        assert stored.status_code == 200
        assert stored.json()["data"] == sent["data"]
    assert not (data / "pg" / "postmaster.pid").exists()


def test_serve_runs_the_projections(database_url: URL, tmp_path: Path) -> None:
    url = database_url.render_as_string(hide_password=False)
    env = environment(
        CAUSEWAY_DATABASE_URL=url,
        CAUSEWAY_DATA_DIR=str(tmp_path),
        CAUSEWAY_PROJECTION_POLL_INTERVAL_S="0.2",
    )
    key = create_key(env, "t", "admin")
    with serving(env) as base:
        auth = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        posted = httpx2.post(
            f"{base}/models/faces/versions", content=registration("1"), headers=auth
        )
        assert posted.status_code == 201
        deadline = time.monotonic() + 20
        while httpx2.get(f"{base}/models/faces", headers=auth).status_code != 200:
            assert time.monotonic() < deadline, "the registry never showed the model"
            time.sleep(0.1)


def _is_whole(answer: bytes) -> bool:
    """Whether ``answer`` holds a head and as much body as its Content-Length says (a
    kept-alive connection is not closed after it)."""
    head, found, body = answer.partition(b"\r\n\r\n")
    if not found:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def _raw(base: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """``request`` sent as it is (the server may stop reading it), and the answer."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for start in range(0, len(request), 16_384):
                conn.sendall(request[start : start + 16_384])
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while not _is_whole(answer) and (chunk := conn.recv(65_536)):
                answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines)
    return int(status_line.split()[1]), headers, body


def test_what_is_not_http_is_refused_and_a_websocket_is_answered_as_http(
    database_url: URL, tmp_path: Path
) -> None:
    # No WebSocket is spoken: an upgrade is answered as the HTTP request it also is.
    url = database_url.render_as_string(hide_password=False)
    with serving(environment(CAUSEWAY_DATABASE_URL=url, CAUSEWAY_DATA_DIR=str(tmp_path))) as base:
        found, _, _ = _raw(base, b"NOT HTTP AT ALL\r\n\r\n")
        assert found == 400
        upgrade = b"GET /nope HTTP/1.1\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n"
        found, headers, body = _raw(base, upgrade)
        assert (found, headers["content-type"]) == (404, "application/problem+json")
        assert orjson.loads(body)["type"] == "/problems/http-error"
