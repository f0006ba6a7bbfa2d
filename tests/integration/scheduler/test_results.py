"""Completing tasks over HTTP on a real PostgreSQL: results caused by the trigger,
retried completions answered once, and results refused for their model."""

from __future__ import annotations

from typing import Any

import httpx2
from fastapi import FastAPI

from tests.integration.conftest import catch_up
from tests.integration.events import JSON, dumps, event
from tests.integration.scheduler.conftest import (
    Client,
    define,
    lease,
    post,
    queued,
)


class TestResults:
    async def test_results_carry_the_trigger_as_their_cause_and_audit_finds_it(
        self, app: FastAPI, admin: Client, worker: Client, register: Any
    ) -> None:
        await register("tumor-detector", "3")
        await define(admin, id="scan", types=["imaging.scan.uploaded"], kind="detect", queue="q")
        scan = await post(admin, type="imaging.scan.uploaded", data={"study": 7})
        await catch_up(app)
        leased = await lease(worker, "q")
        assert leased is not None
        result = event(
            type="imaging.finding.v1",
            modelname="tumor-detector",
            modelversion="3",
            data={"score": 0.93},
        )
        done = await worker.post(
            f"/tasks/{leased['task']['id']}/complete",
            content=dumps({"lease": leased["lease"], "events": [result]}),
            headers=JSON,
        )
        assert done.status_code == 200, done.text
        query = """query($id: ID!) { audit(decisionId: $id) {
            sourceEvents { id } models { name version } chainVerified } }"""
        audit = await admin.post(
            "/graphql", json={"query": query, "variables": {"id": result["id"]}}
        )
        answer = audit.json()["data"]["audit"]
        assert answer["sourceEvents"] == [{"id": scan["id"]}]
        assert answer["models"][0]["name"] == "tumor-detector"
        assert answer["chainVerified"] is True
        task = (await admin.get(f"/tasks/{leased['task']['id']}")).json()
        assert task["state"] == "completed"
        assert [h["type"] for h in task["history"]] == [
            "causeway.task.created", "causeway.task.leased", "causeway.task.completed",
        ]  # fmt: skip

    async def test_a_result_sent_twice_is_stored_once(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await queued(app, admin)
        leased = await lease(worker, "q")
        assert leased is not None
        result = event(type="result", data={"n": 1})
        done = await worker.post(
            f"/tasks/{leased['task']['id']}/complete",
            content=dumps({"lease": leased["lease"], "events": [result, result]}),
            headers=JSON,
        )
        assert done.status_code == 200, done.text
        assert (await admin.get(f"/events/{result['id']}")).status_code == 200
        stored = (await admin.get("/replay?types=result")).text.splitlines()
        assert len(stored) == 1

    async def test_a_number_no_double_holds_is_a_clear_400(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await queued(app, admin)
        leased = await lease(worker, "q")
        assert leased is not None
        result = dumps(event(type="result", data={"n": "@"})).replace(b'"@"', b"1e400")
        body = b'{"lease": "' + leased["lease"].encode() + b'", "events": [' + result + b"]}"
        response = await worker.post(f"/tasks/{leased['task']['id']}/complete", content=body,
                                     headers=JSON)  # fmt: skip
        assert response.status_code == 400
        assert response.json()["type"] == "/problems/invalid-json"  # as on POST /events
        assert "infinity" in response.json()["detail"]

    @staticmethod
    async def completed(
        app: FastAPI, admin: Client, worker: Client, results: list[dict[str, Any]]
    ) -> tuple[str, str, httpx2.Response]:
        """A task leased and completed with ``results``: its path to complete, the lease
        and the first answer."""
        await queued(app, admin)
        leased = await lease(worker, "q")
        assert leased is not None
        path = f"/tasks/{leased['task']['id']}/complete"
        done = dumps({"lease": leased["lease"], "events": results})
        first = await worker.post(path, content=done, headers=JSON)
        assert first.status_code == 200, first.text
        return path, leased["lease"], first

    async def test_a_completion_retried_under_its_lease_gets_the_first_answer(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        result = event(type="result", data={"n": 1})
        path, held, first = await self.completed(app, admin, worker, [result])
        # The answer was lost on its way back: the worker sends the completion again.
        done = dumps({"lease": held, "events": [result]})
        again = await worker.post(path, content=done, headers=JSON)
        assert again.status_code == 200, again.text
        assert again.json() == first.json()
        history = (await admin.get(path.removesuffix("/complete"))).json()["history"]
        assert [h["type"] for h in history].count("causeway.task.completed") == 1
        assert len((await admin.get("/replay?types=result")).text.splitlines()) == 1

    async def test_a_retry_that_sends_other_results_is_refused(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        result = event(type="result", data={"n": 1})
        path, held, first = await self.completed(app, admin, worker, [result])
        other = dumps({"lease": held, "events": [event(type="result")]})
        refused = await worker.post(path, content=other, headers=JSON)
        assert refused.status_code == 409
        assert refused.json()["detail"] == (
            f"task {first.json()['task']!r} was completed under this lease with other results "
            f"({result['id']!r}); a retry must send the same results"
        )
        changed = dumps({"lease": held, "events": [{**result, "data": {"n": 2}}]})
        conflict = await worker.post(path, content=changed, headers=JSON)
        assert conflict.status_code == 409
        assert conflict.json()["type"] == "/problems/id-conflict"
        assert len((await admin.get("/replay?types=result")).text.splitlines()) == 1

    async def test_another_lease_on_a_completed_task_is_not_held(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        path, _, _ = await self.completed(app, admin, worker, [])
        stale = dumps({"lease": "an-older-lease", "events": []})
        again = await worker.post(path, content=stale, headers=JSON)
        assert again.status_code == 409
        assert again.json()["type"].endswith("/lease-lost")
        assert "another lease" not in again.json()["detail"]
        assert "is completed" in again.json()["detail"]

    async def test_a_result_refused_for_its_model_says_why(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await queued(app, admin)
        leased = await lease(worker, "q")
        assert leased is not None
        result = event(type="result", modelname="nobody", modelversion="1")
        response = await worker.post(
            f"/tasks/{leased['task']['id']}/complete",
            content=dumps({"lease": leased["lease"], "events": [result]}),
            headers=JSON,
        )
        assert response.status_code == 422
        assert response.json()["type"] == "/problems/invalid-event"
        assert response.json()["detail"] == (
            "event 0: model 'nobody' version '1' is not registered"
        )

    async def test_a_refused_result_leaves_the_task_leased_and_nothing_written(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await queued(app, admin)
        leased = await lease(worker, "q")
        assert leased is not None
        good, bad = event(type="result"), event(type="result", causationid="no-such-event")
        response = await worker.post(
            f"/tasks/{leased['task']['id']}/complete",
            content=dumps({"lease": leased["lease"], "events": [good, bad]}),
            headers=JSON,
        )
        assert response.status_code == 422
        # The one mistake sent, not the completion the server adds (it names the result).
        assert [e["index"] for e in response.json()["errors"]] == [1]
        assert (await admin.get(f"/tasks/{leased['task']['id']}")).json()["state"] == "leased"
        assert (await admin.get(f"/events/{good['id']}")).status_code == 404
