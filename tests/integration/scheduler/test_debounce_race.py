"""A failed attempt of a debounced task and the dispatcher making a newer task of its key
at the same moment (left by the review that found e166f3b's supersede; a review proved it
with the window widened): each decided without seeing the other, and the stale task was
retried beside the newer one. Both orders, made certain here by running the dispatcher
inside the failure's command: between its look for a newer task and its append, and
between its append and its commit."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from fastapi import FastAPI

from scheduler import debouncing
from scheduler import tasks as t
from scheduler.projections import Dispatcher
from scheduler.rows import tasks as task_rows
from tests.integration.conftest import catch_up
from tests.integration.events import JSON, dumps
from tests.integration.scheduler.conftest import Client, define, fail, lease, post


async def _older_leased(
    app: FastAPI, admin: Client, worker: Client, **route: Any
) -> dict[str, Any]:
    """v1 of key ``u`` leased (no retry backoff, so a retry is ready at once)."""
    await define(admin, id="r", types=["job"], kind="k", queue="q", backoff_base_s=0,
                 debounce={"key": "user", "window_s": 60}, **route)  # fmt: skip
    await post(admin, type="job", data={"user": "u", "v": 1})
    await catch_up(app)
    older = await lease(worker, "q")
    assert older is not None
    return older


def _newer_made_once(app: FastAPI, admin: Client) -> Callable[[], Awaitable[None]]:
    """The first call posts v2 of key ``u`` and has the dispatcher make its task."""
    done = False

    async def make() -> None:
        nonlocal done
        if done:
            return
        done = True
        await post(admin, type="job", data={"user": "u", "v": 2})
        runner = app.state.runner
        await runner.catch_up(runner.projection(Dispatcher.name))

    return make


async def _only_the_newer_runs(
    app: FastAPI, admin: Client, worker: Client, older: dict[str, Any], after: dict[str, Any]
) -> None:
    # Before the task book has caught up with the log (the older task's row may say
    # ready, the log says superseded), and after.
    offered = await lease(worker, "q", worker="w2")
    assert offered is not None
    assert offered["trigger"]["data"]["v"] == 2, (after, offered)
    await catch_up(app)
    assert await lease(worker, "q", worker="w3") is None
    ended = (await admin.get(f"/tasks/{older['task']['id']}")).json()
    assert ended["state"] == "superseded", ended
    assert after["state"] == "superseded", after  # the failure's answer says so too


def _race(
    monkeypatch: pytest.MonkeyPatch, newer_made: Callable[[], Awaitable[None]], between: str
) -> None:
    """Run ``newer_made`` inside the command: after its look for a newer task and before
    its append, or after its append, as its row (or rows) is written, before its commit."""
    if between == "look and append":
        real_newer = debouncing.newer_task

        async def newer_task(conn: Any, state: t.TaskState) -> t.TaskState | None:
            found = await real_newer(conn, state)
            await newer_made()
            return found

        monkeypatch.setattr(debouncing, "newer_task", newer_task)
        return
    real_write, real_writes = task_rows.write_task, task_rows.write_tasks

    async def write_task(conn: Any, state: t.TaskState) -> None:
        if state.state == "ready":  # put back in the queue, appended: its row next
            await newer_made()
        await real_write(conn, state)

    async def write_tasks(conn: Any, states: Any) -> None:
        if any(state.state == "ready" for state in states):
            await newer_made()
        await real_writes(conn, states)

    monkeypatch.setattr(task_rows, "write_task", write_task)
    monkeypatch.setattr(task_rows, "write_tasks", write_tasks)


BOTH_ORDERS = pytest.mark.parametrize("between", ["look and append", "append and commit"])


@BOTH_ORDERS
async def test_a_failed_attempt_racing_the_dispatcher(
    app: FastAPI, admin: Client, worker: Client, monkeypatch: pytest.MonkeyPatch, between: str
) -> None:
    older = await _older_leased(app, admin, worker)
    _race(monkeypatch, _newer_made_once(app, admin), between)
    after = await fail(worker, older, "transient")
    await _only_the_newer_runs(app, admin, worker, older, after)


@BOTH_ORDERS
@pytest.mark.parametrize("bulk", [False, True], ids=["one", "bulk"])
async def test_a_requeue_racing_the_dispatcher(
    app: FastAPI,
    admin: Client,
    worker: Client,
    monkeypatch: pytest.MonkeyPatch,
    between: str,
    bulk: bool,
) -> None:
    """An operator's requeue of a dead letter of the key, one by one or in bulk (which, a
    review found, looked for a newer task before its append only)."""
    older = await _older_leased(app, admin, worker, max_retries=0)
    dead = await worker.post(
        f"/tasks/{older['task']['id']}/fail",
        content=dumps({"lease": older["lease"], "class": "data_invalid", "message": "bad"}),
        headers=JSON,
    )
    assert dead.json()["state"] == "dead", dead.text
    _race(monkeypatch, _newer_made_once(app, admin), between)
    path = "/dead-letters/requeue" if bulk else f"/dead-letters/{older['task']['id']}/requeue"
    requeued = await admin.post(path, content=b"{}", headers=JSON)
    assert requeued.status_code == 200, requeued.text
    after = requeued.json()["requeued"][0] if bulk else requeued.json()
    await _only_the_newer_runs(app, admin, worker, older, after)


async def test_the_next_event_of_the_key_is_dispatched_while_a_row_lags(
    app: FastAPI, admin: Client, worker: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a review: after the race in the second order, the older task's row says ready
    while the log says superseded, until the task book catches up. The dispatcher reached
    the next event of the key first, superseded the row's stale version again, and the
    log refused it: the dispatcher stopped at that event."""
    older = await _older_leased(app, admin, worker)
    _race(monkeypatch, _newer_made_once(app, admin), "append and commit")
    after = await fail(worker, older, "transient")
    monkeypatch.undo()
    assert after["state"] == "superseded", after
    await post(admin, type="job", data={"user": "u", "v": 3})
    runner = app.state.runner
    await runner.catch_up(runner.projection(Dispatcher.name))  # before the task book
    await catch_up(app)
    offered = await lease(worker, "q", worker="w2")
    assert offered is not None
    assert offered["trigger"]["data"]["v"] == 3, offered
    assert await lease(worker, "q", worker="w3") is None


async def test_a_lease_racing_the_dispatcher_does_not_run_the_stale_task(
    app: FastAPI, admin: Client, worker: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a review: a ready row a leaser had locked, its lease not yet appended, does not
    lag its stream; reading the log only of rows that lag, the dispatcher made the newer
    task without superseding it, and the lease ran the stale task beside the newer one."""
    await define(admin, id="r", types=["job"], kind="k", queue="q",
                 debounce={"key": "user", "window_s": 60})  # fmt: skip
    await post(admin, type="job", data={"user": "u", "v": 1})
    await catch_up(app)
    real = task_rows.fetch_next_ready
    newer_made = _newer_made_once(app, admin)

    async def fetch_next_ready(*args: Any, **kwargs: Any) -> Any:
        found = await real(*args, **kwargs)  # v1's row locked by the leaser
        if found:
            await newer_made()  # before the lease appends
        return found

    monkeypatch.setattr(task_rows, "fetch_next_ready", fetch_next_ready)
    offered = await lease(worker, "q")
    monkeypatch.undo()
    await catch_up(app)
    second = await lease(worker, "q", worker="w2")
    versions = [x["trigger"]["data"]["v"] for x in (offered, second) if x is not None]
    assert versions == [2], versions
