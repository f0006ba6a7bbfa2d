"""`causeway migrate` on a store the release at revision 0017 wrote (before 0018's lease
requests, 0019's and 0022's debouncing, 0020's member names): what a user reads back
after the upgrade is what that release answered, the chain verifies, the read models
rebuild from the log to what they were, and new writes chain onto the old ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI
from sqlalchemy import URL

from app.db.schema import current_revision, head_revision
from tests.integration.conftest import asgi_client, catch_up
from tests.integration.events import STRUCTURED, dumps
from tests.integration.upgrades.conftest import OLD, cli, migrate, rows

# The read models, each as a query whose rows an upgrade must keep (0017's columns).
READ_MODELS = {
    "tasks": "SELECT tenant, id, route_id, kind, queue, priority, req_numbers, req_flags,"
    " req_labels, trigger_id, trigger_type, trigger_time, debounce_key, state, attempts,"
    " max_retries, service, on_model_mismatch, lease_id, worker, error_class, error,"
    " disposition, seq, version, position FROM tasks ORDER BY id",
    "routes": "SELECT * FROM routes ORDER BY id",
    "deployments": "SELECT * FROM deployments ORDER BY service",
    "deployment_history": "SELECT * FROM deployment_history ORDER BY position",
    "model_versions": "SELECT * FROM model_versions ORDER BY version",
    "model_aliases": "SELECT * FROM model_aliases ORDER BY alias",
}
# 0020: the store's members are named as CloudEvents names attributes.
RENAMED = {"stream_version": "streamversion", "recordedtime": "storedtime", "prev_hash": "prevhash"}


def read_models(url: URL) -> dict[str, list[dict[str, Any]]]:
    return {name: rows(url, sql) for name, sql in READ_MODELS.items()}


def as_now(old: dict[str, Any]) -> dict[str, Any]:
    return {RENAMED.get(k, k): v for k, v in old.items()}


def test_migrate_keeps_the_read_models_and_the_chain(old_store: URL, tmp_path: Path) -> None:
    before = read_models(old_store)
    done = migrate(old_store, tmp_path)
    assert done.returncode == 0, done.stderr[-800:]
    assert current_revision(old_store) == head_revision()
    assert read_models(old_store) == before
    verified = cli(old_store, tmp_path, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.startswith(f"ok: {len(OLD['replay'])} events"), verified.stdout


async def test_every_event_reads_back_as_the_old_release_answered(upgraded_app: FastAPI) -> None:
    async with asgi_client(upgraded_app, OLD["keys"]["reader"]) as reader:
        for event_id, old in OLD["events"].items():
            now = (await reader.get(f"/events/{event_id}")).json()
            expected = as_now(old)
            if "causes" in expected:
                causes = expected.pop("causes")
                if causes:
                    expected["causationid"] = ",".join(causes)
            assert {k: now.get(k) for k in expected} == expected, event_id
        replay = [orjson.loads(x) for x in (await reader.get("/replay")).text.splitlines()]
        assert [e["id"] for e in replay] == [e["id"] for e in OLD["replay"]]
        query = (
            '{ audit(decisionId: "alert-1") { sourceEvents { id } derivedEvents { id }'
            " models { name version } chainVerified } }"
        )
        answer = (await reader.post("/graphql", json={"query": query})).json()
        assert answer["data"]["audit"] == {
            "sourceEvents": [{"id": "frame-1"}],
            "derivedEvents": [{"id": "face-1"}],
            "models": [{"name": "faces", "version": "1"}],
            "chainVerified": True,
        }, answer


async def test_the_read_models_answer_as_before(upgraded_app: FastAPI) -> None:
    async with asgi_client(upgraded_app, OLD["keys"]["admin"]) as admin:
        deployment = (await admin.get("/deployments/gate")).json()
        assert {k: deployment.get(k) for k in OLD["deployment"]} == OLD["deployment"]
        models = (await admin.get("/models/faces")).json()
        assert {k: models.get(k) for k in OLD["models"]} == OLD["models"]
        dead = (await admin.get("/dead-letters")).json()
        old_ids = [d["id"] for d in OLD["dead_letters"]["dead_letters"]]
        assert [d["id"] for d in dead["dead_letters"]] == old_ids
        for task_id, old in OLD["tasks"].items():
            now = (await admin.get(f"/tasks/{task_id}")).json()
            keep = ("state", "attempts", "disposition", "route", "queue", "debounce_key")
            assert {k: now.get(k) for k in keep} == {k: old.get(k) for k in keep}, task_id


async def test_projections_rebuild_from_the_old_log_to_the_same_rows(
    upgraded_app: FastAPI, upgraded_store: URL
) -> None:
    migrated = read_models(upgraded_store)
    runner = upgraded_app.state.runner
    for projection in runner.projections:
        assert await runner.rebuild(projection) > 0, projection.name
        status = await runner.status(projection)
        assert (status.checkpoint, status.last_error) == (len(OLD["replay"]), None), status
    assert read_models(upgraded_store) == migrated


async def test_new_writes_chain_onto_the_old_log(
    upgraded_app: FastAPI, upgraded_store: URL
) -> None:
    [last] = rows(
        upgraded_store, "SELECT position, hash FROM events ORDER BY position DESC LIMIT 1"
    )
    async with asgi_client(upgraded_app, OLD["keys"]["admin"]) as admin:
        body = {"specversion": "1.0", "id": "after-1", "source": "/after", "type": "job",
                "causationid": "frame-1", "correlationid": "run-1", "data": {"n": 9}}  # fmt: skip
        response = await admin.post("/events", content=dumps(body), headers=STRUCTURED)
        assert response.status_code == 201, response.text
        await catch_up(upgraded_app)
        # A newer event of a debounced key an old (0017) row holds supersedes it.
        body = {"specversion": "1.0", "id": "profile-4", "source": "/users",
                "type": "profile.changed", "time": "2026-11-30T12:00:03Z",
                "data": {"user_id": "bob"}}  # fmt: skip
        response = await admin.post("/events", content=dumps(body), headers=STRUCTURED)
        assert response.status_code == 201, response.text
        await catch_up(upgraded_app)
        new = (await admin.get("/events/after-1")).json()
        assert new["prevhash"] == last["hash"].hex()
        assert new["position"] == last["position"] + 1
        replay = [orjson.loads(x) for x in (await admin.get("/replay")).text.splitlines()]
        ids = [e["id"] for e in replay]
        assert ids[: len(OLD["replay"])] == [e["id"] for e in OLD["replay"]]
        assert {"after-1", "profile-4"} <= set(ids)
        bob = [t for t in rows(upgraded_store, "SELECT id, state, trigger_id FROM tasks")
               if t["trigger_id"] in ("profile-3", "profile-4")]  # fmt: skip
        assert sorted((t["trigger_id"], t["state"]) for t in bob) == [
            ("profile-3", "superseded"), ("profile-4", "ready"),
        ]  # fmt: skip
        queues = (await admin.get("/queues")).json()
        assert queues, queues
