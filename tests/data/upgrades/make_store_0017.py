"""Make ``store_0017.sql`` and ``store_0017.json``: a store as the release at revision 0017
wrote it (commit 8475a54, the last before 0018), for the upgrade tests beside this file.

Not a test. Run with the OLD release's code first on the path, as an operator ran it:

    mkdir /tmp/old_0017 && git archive 8475a54 | tar -x -C /tmp/old_0017
    cd /tmp/old_0017 && CAUSEWAY_TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \
        python /work/main/tests/data/upgrades/make_store_0017.py

It migrates a new database with that release's migrations (its 0013 installs that
release's function files), writes through that release's HTTP API (models, a deployment,
events with causes and correlation, routes, tasks completed, dead-lettered, debounced,
leased, ready), lets its projections catch up, dumps the database (pg_dump, plain SQL)
and keeps what that release answered for each read, and the keys it issued.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import psycopg
from sqlalchemy import make_url

HERE = Path(__file__).resolve().parent
sys.path.insert(0, os.getcwd())  # the old release, not /work/main

from app.db.engine import create_engine  # noqa: E402
from app.db.schema import current_revision, upgrade_to_head  # noqa: E402
from app.main import create_app, dispose  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.store.keys import KeyStore, parse_scopes  # noqa: E402
from tests.integration.conftest import asgi_client, catch_up  # noqa: E402
from tests.integration.events import JSON, STRUCTURED, dumps, registration  # noqa: E402

NAME = "causeway_make_0017"
DSN = (
    make_url(os.environ["CAUSEWAY_TEST_DATABASE_URL"])
    .set(database=NAME, drivername="postgresql")
    .render_as_string(hide_password=False)
)


def ok(response: Any, *codes: int) -> dict[str, Any]:
    assert response.status_code in (codes or (200, 201)), response.text
    return dict(response.json()) if response.content else {}


async def main() -> None:
    server = make_url(os.environ["CAUSEWAY_TEST_DATABASE_URL"])
    admin_dsn = server.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {NAME}")
        conn.execute(f"CREATE DATABASE {NAME}")
    url = server.set(database=NAME, drivername="postgresql+psycopg")
    upgrade_to_head(url)
    assert current_revision(url) == "0017"
    owner = create_engine(url, pool_size=2, role=None)
    keys: dict[str, str] = {}
    async with owner.begin() as conn:
        for name, scopes in (("admin", "admin"), ("worker", "worker"), ("reader", "ingest,read")):
            keys[name] = (await KeyStore(conn).create("acme", parse_scopes(scopes))).key
    await owner.dispose()
    app = create_app(Settings(_env_file=None), database_url=url)
    answers: dict[str, Any] = {"keys": keys}
    try:
        async with (
            asgi_client(app, keys["admin"]) as admin,
            asgi_client(app, keys["worker"]) as worker,
        ):
            await write(app, admin, worker)
            await catch_up(app)
            answers.update(await read(admin))
    finally:
        await dispose(app)
    path = HERE / "store_0017.sql"
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    subprocess.run(
        [shutil.which("pg_dump") or "pg_dump", "--no-owner", "--file", str(path), dsn], check=True
    )
    (HERE / "store_0017.json").write_bytes(orjson.dumps(answers, option=orjson.OPT_INDENT_2))


async def post(client: Any, **body: Any) -> None:
    body = {"specversion": "1.0", **body}
    ok(await client.post("/events", content=dumps(body), headers=STRUCTURED), 201)


async def write(app: Any, admin: Any, worker: Any) -> None:
    for version in ("1", "2"):
        ok(await admin.post("/models/faces/versions", content=registration(version), headers=JSON))
    ok(await admin.put("/models/faces/aliases/prod", content=dumps({"version": "1"}),
                       headers=JSON), 200, 201)  # fmt: skip
    deploy = "/deployments/gate"
    ok(await admin.post(f"{deploy}/rollouts", content=dumps({"model": "faces", "version": "1",
                        "percent": 100}), headers=JSON))  # fmt: skip
    ok(await admin.post(f"{deploy}/promote", content=b"{}", headers=JSON))
    ok(await admin.post(f"{deploy}/rollouts", content=dumps({"model": "faces", "version": "2",
                        "percent": 20}), headers=JSON))  # fmt: skip
    # Lineage: a frame, the model's finding from it, an alert from that (binary data).
    await post(admin, id="frame-1", source="/cameras/gate", type="com.example.frame.v1",
               subject="gate", time="2026-11-30T12:00:00.123456789Z", correlationid="run-1",
               data={"motion": 0.92, "n": 1.0, "tiny": 2.5e-6}, site="north")  # fmt: skip
    await post(admin, id="face-1", source="/models/faces", type="com.example.face.v1",
               causationid="frame-1", correlationid="run-1", modelname="faces",
               modelversion="1", data={"score": 0.97})  # fmt: skip
    response = await admin.post(
        "/events", content=b"\x00\x01binary",
        headers={"ce-specversion": "1.0", "ce-id": "alert-1", "ce-source": "/rules",
                 "ce-type": "com.example.alert.v1", "ce-causationid": "face-1",
                 "ce-correlationid": "run-1", "Content-Type": "application/octet-stream"},
    )  # fmt: skip
    ok(response, 201)
    # Scheduler: a plain route and a debounced one.
    route = {"id": "jobs", "types": ["job"], "kind": "k", "queue": "q", "max_retries": 0}
    ok(await admin.post("/routes", content=dumps(route), headers=JSON), 201)
    debounced = {"id": "reindex", "types": ["profile.changed"], "kind": "reindex",
                 "queue": "d", "debounce": {"key": "user_id", "window_s": 3600}}  # fmt: skip
    ok(await admin.post("/routes", content=dumps(debounced), headers=JSON), 201)
    for n in range(1, 5):
        await post(admin, id=f"job-{n}", source="/jobs", type="job", correlationid="run-2",
                   causationid="frame-1", data={"n": n})  # fmt: skip
    await post(admin, id="profile-1", source="/users", type="profile.changed",
               time="2026-11-30T12:00:00Z", data={"user_id": "ann", "n": 1})  # fmt: skip
    await post(admin, id="profile-2", source="/users", type="profile.changed",
               time="2026-11-30T12:00:01Z", data={"user_id": "ann", "n": 2})  # fmt: skip
    await post(admin, id="profile-3", source="/users", type="profile.changed",
               time="2026-11-30T12:00:02Z", data={"user_id": "bob"})  # fmt: skip
    await catch_up(app)

    async def lease(queue: str) -> dict[str, Any]:
        body = dumps({"worker": "w1"})
        return ok(await worker.post(f"/queues/{queue}/lease", content=body, headers=JSON), 200)

    done = await lease("q")
    ok(await worker.post(f"/tasks/{done['task']['id']}/complete",
                         content=dumps({"lease": done["lease"], "events": []}), headers=JSON))  # fmt: skip
    dead = await lease("q")
    ok(await worker.post(f"/tasks/{dead['task']['id']}/fail",
                         content=dumps({"lease": dead["lease"], "class": "data_invalid",
                                        "message": "boom"}), headers=JSON))  # fmt: skip
    await lease("q")  # stays leased (its lease runs out after the upgrade)
    await lease("d")  # a debounced task, leased
    await catch_up(app)


async def read(admin: Any) -> dict[str, Any]:
    events = [orjson.loads(line) for line in (await admin.get("/replay")).text.splitlines()]
    tasks = {}
    with psycopg.connect(DSN) as conn:
        ids = [i for (i,) in conn.execute("SELECT id FROM tasks ORDER BY id").fetchall()]
    for task_id in ids:
        tasks[task_id] = ok(await admin.get(f"/tasks/{task_id}"), 200)
    return {
        "events": {e["id"]: ok(await admin.get(f"/events/{e['id']}"), 200) for e in events},
        "replay": events,
        "tasks": tasks,
        "dead_letters": ok(await admin.get("/dead-letters"), 200),
        "deployment": ok(await admin.get("/deployments/gate"), 200),
        "models": ok(await admin.get("/models/faces"), 200),
        "routes": ok(await admin.get("/routes"), 200),
    }


if __name__ == "__main__":
    asyncio.run(main())
