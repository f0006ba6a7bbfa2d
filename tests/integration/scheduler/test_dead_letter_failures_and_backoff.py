"""A dead letter's failures after several retries (every attempt, in order, with its
class and message), the waits between them, and the filters at their bounds."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from fastapi import FastAPI

from tests.integration.conftest import catch_up
from tests.integration.events import JSON, dumps
from tests.integration.scheduler.conftest import Client, define, lease, post


async def _fail(
    worker: Client, leased: dict[str, Any], error_class: str, message: str
) -> dict[str, Any]:
    answer = await worker.post(
        f"/tasks/{leased['task']['id']}/fail",
        content=dumps({"lease": leased["lease"], "class": error_class, "message": message}),
        headers=JSON,
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def test_failures_complete_in_order_and_backoff_as_documented(
    app: FastAPI, admin: Client, worker: Client
) -> None:
    await define(
        admin, id="r", types=["job"], kind="k", queue="q", max_retries=3, backoff_base_s=0.2
    )
    await post(admin, type="job")
    await catch_up(app)
    classes = ["transient", "unknown", "model_version_mismatch", "data_invalid"]
    task = None
    for attempt, error_class in enumerate(classes, start=1):
        leased = None
        for _ in range(200):
            leased = await lease(worker, "q")
            if leased is not None:
                break
            await asyncio.sleep(0.02)
        assert leased is not None
        task = leased["task"]["id"]
        assert leased["task"]["attempts"] == attempt
        after = await _fail(worker, leased, error_class, f"m{attempt}")
        if attempt < len(classes):
            history = (await admin.get(f"/tasks/{task}")).json()["history"]
            data = history[-1]["data"]
            expected = 0.2 * 2 ** (attempt - 1) * (1 + data["jitter"])
            assert abs(data["delay_s"] - expected) < 1e-5, data
            waited = datetime.fromisoformat(data["retry_at"]) - datetime.fromisoformat(data["at"])
            # The wait runs from the decision's own time: retry_at - at is delay_s (it
            # ran from a clock read one or two statements before the decision's time).
            assert abs(waited - timedelta(seconds=expected)) < timedelta(microseconds=2), data
            assert 0 <= data["jitter"] <= 0.25
            # Not leased before its retry time.
            early = datetime.fromisoformat(data["retry_at"]) - timedelta(milliseconds=30)
            while datetime.now(early.tzinfo) < early:
                assert await lease(worker, "q") is None
                await asyncio.sleep(0.02)
            assert after["state"] == "ready"
    assert after["state"] == "dead"
    one = (await admin.get(f"/dead-letters/{task}")).json()
    assert [(f["attempt"], f["outcome"], f["class"], f["message"]) for f in one["failures"]] == [
        (1, "retried", "transient", "m1"),
        (2, "retried", "unknown", "m2"),
        (3, "retried", "model_version_mismatch", "m3"),
        (4, "dead_lettered", "data_invalid", "m4"),
    ]
    ats = [f["at"] for f in one["failures"]]
    assert ats == sorted(ats)
    assert one["disposition"] == "archived"
    # class: the last failure's, at its bound
    for error_class, found in (
        ("data_invalid", [task]),
        ("transient", []),
        ("model_version_mismatch", []),
    ):
        listed = (await admin.get("/dead-letters", params={"class": error_class})).json()
        assert [d["id"] for d in listed["dead_letters"]] == found, error_class
    # since: inclusive, to the microsecond, in any offset
    died = datetime.fromisoformat(one["finished_at"])
    for since, found in (
        (died, [task]),
        (died - timedelta(microseconds=1), [task]),
        (died + timedelta(microseconds=1), []),
        (died.astimezone(datetime.now().astimezone().tzinfo), [task]),
    ):
        listed = (await admin.get("/dead-letters", params={"since": since.isoformat()})).json()
        assert [d["id"] for d in listed["dead_letters"]] == found, since
        body = dumps({"since": since.isoformat(), "limit": 1, "reason": "probe"})
        if not found:
            bulk = await admin.post("/dead-letters/requeue", content=body, headers=JSON)
            assert bulk.json() == {"requeued": [], "more": False}
