"""What the scheduler refuses over HTTP, and how: bad failure messages, queue names,
numbers no double or chain holds, and completions over the request limit."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi import FastAPI
from sqlalchemy import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from app.main import create_app, dispose
from app.settings import Settings
from app.store.verify import verify_chain
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import JSON, dumps, event
from tests.integration.scheduler.conftest import (
    Client,
    lease,
    queued,
)


class TestBadInput:
    async def test_a_failure_message_with_a_nul_is_refused_and_fails_no_one_else(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await queued(app, admin, jobs=2)
        first, second = await lease(worker, "q"), await lease(worker, "q")
        assert first is not None
        assert second is not None
        bad = dumps({"lease": first["lease"], "class": "transient", "message": "x\u0000"})
        good = {"lease": second["lease"], "class": "transient", "message": "fine"}
        refused, accepted = await asyncio.gather(
            worker.post(f"/tasks/{first['task']['id']}/fail", content=bad, headers=JSON),
            worker.post(f"/tasks/{second['task']['id']}/fail", content=dumps(good), headers=JSON),
        )
        assert refused.status_code == 422
        assert accepted.status_code == 200

    async def test_a_queue_no_route_could_name_is_422_not_an_empty_queue(
        self, admin: Client, worker: Client
    ) -> None:
        leased = await worker.post(
            "/queues/gpu%20queue/lease", content=dumps({"worker": "w1"}), headers=JSON
        )
        assert leased.status_code == 422, leased.text  # was 204, after waiting, for ever
        assert leased.json()["detail"].startswith("#/path/queue:")
        assert (await admin.get("/queues/gpu%20queue/autoscale")).status_code == 422
        assert (await admin.get("/dead-letters", params={"queue": "gpu queue"})).status_code == 422

    @pytest.mark.parametrize("name", [".", ".."])
    async def test_a_name_a_path_cannot_carry_is_refused(self, admin: Client, name: str) -> None:
        """Clients remove ``.`` and ``..`` segments from a path (``/queues/./lease`` goes to
        ``/queues/lease``): a queue of that name could never be leased from, nor a route of
        that id read or deleted, so neither is taken."""
        for route in (
            {"id": "r", "types": ["job"], "kind": "k", "queue": name},
            {"id": name, "types": ["job"], "kind": "k", "queue": "q"},
        ):
            defined = await admin.post("/routes", content=dumps(route), headers=JSON)
            assert defined.status_code == 400, (route, defined.text)
        assert (await admin.get("/routes")).json()["routes"] == []

    async def test_results_with_huge_integers_are_refused_as_ingest_refuses_them(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await queued(app, admin)
        leased = await lease(worker, "q")
        assert leased is not None
        result = event(type="res", data={"n": 2**70})
        body = json.dumps({"lease": leased["lease"], "events": [result]})
        done = await worker.post(
            f"/tasks/{leased['task']['id']}/complete", content=body, headers=JSON
        )
        assert done.status_code == 422, done.text  # a problem naming the number, never a 500
        assert "I-JSON" in done.json()["detail"]

    async def test_route_numbers_are_stored_as_the_chain_hashes_them(
        self, app: FastAPI, admin: Client, engine: AsyncEngine
    ) -> None:
        # jsonb reads -0.0 and 2.0 back as 0 and 2: stored as they came, they broke the
        # chain (`causeway verify`) of the route's causeway.route.defined event.
        body = (
            b'{"id": "r", "types": ["job"], "kind": "k", "queue": "q",'
            b' "backoff_base_s": -0.0, "requires": {"gpu_memory_gb": 2.0}}'
        )
        defined = await admin.post("/routes", content=body, headers=JSON)
        assert defined.status_code == 201, defined.text
        huge = body.replace(b'"r"', b'"r2"').replace(b"2.0}", b"1e16}")
        refused = await admin.post("/routes", content=huge, headers=JSON)
        assert refused.status_code == 400, refused.text  # no capability is that large
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["detail"].startswith("requires.gpu_memory_gb must be")
        async with engine.connect() as conn:
            report = await verify_chain(conn)
        assert report.is_intact, report
        await catch_up(app)
        [route] = (await admin.get("/routes")).json()["routes"]
        assert (route["id"], route["backoff_base_s"], route["requires"]) == (
            "r",
            0,
            {"gpu_memory_gb": 2},
        )

    async def test_a_completion_over_the_request_limit_is_413(
        self, database_url: URL, make_key: MakeKey
    ) -> None:
        app = create_app(
            Settings(_env_file=None, max_request_bytes=1000), database_url=database_url
        )
        try:
            async with asgi_client(app, await make_key("acme", "admin")) as admin:
                body = dumps({"lease": "x", "events": [event(data={"pad": "x" * 2000})]})
                response = await admin.post("/tasks/t/complete", content=body, headers=JSON)
                assert response.status_code == 413
        finally:
            await dispose(app)
