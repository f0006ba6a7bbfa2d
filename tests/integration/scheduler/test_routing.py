"""Routing over HTTP on a real PostgreSQL: routes defined, applied by the dispatcher
and deleted; what they match, fan out to, and never route back into the scheduler."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.tables import events, log_head
from app.errors import BadRequest
from app.projections.batches import ProjectionFailed
from app.store.log import EventLog
from app.store.records import NewEvent
from scheduler.creation import TaskMaker
from scheduler.tasks import task_id_for
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import JSON, STRUCTURED, dumps, event, registration
from tests.integration.scheduler.conftest import (
    Client,
    define,
    events_of_type,
    lease,
    post,
    queues,
)


class TestRouting:
    async def test_lineage_extensions_route_like_the_others(
        self, app: FastAPI, admin: Client
    ) -> None:
        await define(admin, id="run", types=["job"], where=["correlationid=run-9"], kind="k",
                     queue="runs")  # fmt: skip
        await define(admin, id="model", types=["job"], where=["ext.modelname exists"], kind="k",
                     queue="models")  # fmt: skip
        await admin.post("/models/det/versions", content=registration("1"), headers=JSON)
        await post(admin, type="job", correlationid="run-9")
        await post(admin, type="job", correlationid="run-8", modelname="det", modelversion="1")
        await define(admin, id="line", types=["job"], where=["stream=line-7"], kind="k",
                     queue="lines")  # fmt: skip
        await post(admin, type="job", subject="press-3", data={"stream": "line-7"})
        await catch_up(app)
        found = await queues(admin)
        assert (found["runs"]["ready"], found["models"]["ready"]) == (1, 1)
        # A bare name still reaches a data field before a lineage extension of that name,
        # as it did before routes read them: the event's stream is press-3.
        assert found["lines"]["ready"] == 1

    @pytest.mark.parametrize(
        "debounce",
        [
            {"key": "", "window_s": 5},
            {"key": "user_id", "window_s": 5, "extra": 1},
            {"key": "a b", "window_s": 5},
            {"key": "data.x.y", "window_s": 5},
        ],
    )
    async def test_a_debounce_that_could_never_match_is_refused(
        self, admin: Client, debounce: dict[str, Any]
    ) -> None:
        route = {"id": "d", "types": ["job"], "kind": "k", "queue": "q", "debounce": debounce}
        response = await admin.post("/routes", content=dumps(route), headers=JSON)
        assert response.status_code == 400, response.text
        assert "debounce" in response.json()["detail"]

    async def test_unknown_prewarm_fields_are_refused(self, admin: Client) -> None:
        route = {"id": "p", "types": ["job"],
                 "prewarm": {"model": "m", "count": 2, "within_s": 1, "x": 1}}  # fmt: skip
        response = await admin.post("/routes", content=dumps(route), headers=JSON)
        assert response.status_code == 400

    async def test_fan_out_with_attribute_predicates(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await define(
            admin,
            id="lights",
            types=["home.sensor.*"],
            where=["device_type=light", "room in (bedroom, kitchen)"],
            kind="switch",
            queue="lights",
        )
        await define(admin, id="audit", types=["home.sensor.*"], kind="log", queue="audit")
        await define(
            admin, id="motion", types=["home.motion"], where=["user_id exists"], kind="greet",
            queue="lights",
        )  # fmt: skip
        kitchen = await post(
            admin, type="home.sensor.changed", data={"device_type": "light", "room": "kitchen"}
        )  # fmt: skip
        await post(
            admin, type="home.sensor.changed", data={"device_type": "light", "room": "garage"}
        )
        await post(
            admin, type="home.sensor.changed", data={"device_type": "lock", "room": "bedroom"}
        )
        await post(admin, type="home.motion", data={"room": "hall"})
        await post(admin, type="other.thing", data={"device_type": "light", "room": "kitchen"})
        await catch_up(app)

        depth = await queues(admin)
        assert (depth["lights"]["ready"], depth["audit"]["ready"]) == (1, 3)
        leased = await lease(worker, "lights")
        assert leased is not None
        assert leased["task"]["kind"] == "switch"
        assert leased["trigger"]["id"] == kitchen["id"]
        assert leased["trigger"]["data"] == {"device_type": "light", "room": "kitchen"}

    async def test_a_task_is_made_once_even_when_the_dispatcher_runs_again(
        self, app: FastAPI, admin: Client, engine: AsyncEngine
    ) -> None:
        await define(admin, id="audit", types=["home.sensor.changed"], kind="log", queue="audit")
        await post(admin, type="home.sensor.changed")
        await catch_up(app)
        async with engine.connect() as conn:
            head = (await conn.execute(select(log_head.c.position))).scalar_one()
        runner = app.state.runner
        dispatcher = runner.projection("scheduler-dispatch")
        await runner.rebuild(dispatcher)
        async with engine.connect() as conn:
            assert (await conn.execute(select(log_head.c.position))).scalar_one() == head
        assert (await queues(admin))["audit"]["ready"] == 1

    async def test_one_batch_makes_its_tasks_in_the_order_of_their_events(
        self, app: FastAPI, admin: Client
    ) -> None:
        # The dispatcher keeps plain tasks until its batch ends and makes them together; a
        # debounced task is decided at once, after the plain ones kept before it.
        await define(admin, id="all", types=["job"], kind="k", queue="all")
        await define(admin, id="once", types=["job"], kind="k", queue="once",
                     debounce={"key": "user_id", "window_s": 60})  # fmt: skip
        first = await post(admin, type="job", data={"user_id": "u"})
        second = await post(admin, type="job", data={"user_id": "u"})
        third = await post(admin, type="job", data={})
        await catch_up(app)
        decided = [
            (
                e["type"].rpartition(".")[2],
                e["data"].get("by", e["causationid"]),
                e["data"].get("route"),
            )
            for e in await events_of_type(admin, "causeway.task.created,causeway.task.superseded")
        ]
        assert decided == [
            ("created", first["id"], "all"),
            ("created", first["id"], "once"),
            ("created", second["id"], "all"),
            ("superseded", second["id"], None),
            ("created", second["id"], "once"),
            ("created", third["id"], "all"),
            ("created", third["id"], "once"),
        ]
        depth = await queues(admin)
        assert (depth["all"]["ready"], depth["once"]["ready"]) == (3, 2)

    async def test_a_task_the_log_refuses_stops_the_dispatcher_at_its_event(
        self, app: FastAPI, admin: Client, engine: AsyncEngine
    ) -> None:
        await define(admin, id="r", types=["job"], kind="k", queue="q")
        await catch_up(app)
        before, bad = await post(admin, type="job"), event(type="job")
        # Something else took the stream the task of ``bad`` would be made on (clients
        # cannot: ``causeway:`` streams are refused at ingest).
        taken = f"causeway:task:{task_id_for('acme', 'r', bad['id'])}"
        async with engine.begin() as conn:
            await EventLog(conn).append(
                "acme", [NewEvent(id="squatter", source="/test", type="note", stream=taken)]
            )
        for body in (bad, event(type="job")):
            response = await admin.post("/events", content=dumps(body), headers=STRUCTURED)
            assert response.status_code == 201, response.text
        async with engine.connect() as conn:
            at = (
                await conn.execute(select(events.c.position).where(events.c.id == bad["id"]))
            ).scalar_one()
        runner = app.state.runner
        dispatcher = runner.projection("scheduler-dispatch")
        with pytest.raises(ProjectionFailed) as failed:
            await runner.step(dispatcher)
        assert failed.value.position == at
        assert "VersionConflict" in str(failed.value)
        # What came before it is made once the projection stops right at it.
        await runner.step(dispatcher, until=at - 1)
        created = await events_of_type(admin, "causeway.task.created")
        assert [e["causationid"] for e in created] == [before["id"]]

    async def test_tasks_the_log_refuses_together_but_takes_one_by_one_are_made(
        self, app: FastAPI, admin: Client, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """When the batch's append is refused as a whole and every task then goes in on its
        own, the dispatcher raised the first refusal again: its batch rolled back, and
        failed the same way at every try, for ever."""
        await define(admin, id="r", types=["job"], kind="k", queue="q")
        for _ in range(3):
            await post(admin, type="job")

        async def refused_whole(*_: Any) -> int:
            raise BadRequest("too much at once")

        monkeypatch.setattr(TaskMaker, "make_many", refused_whole)
        await catch_up(app)
        assert (await queues(admin))["q"]["ready"] == 3

    async def test_only_events_after_a_tenants_first_route_are_routed(
        self, app: FastAPI, admin: Client, make_key: MakeKey
    ) -> None:
        # Everything is appended before the dispatcher runs, so one batch would span the
        # route's definition: events before it, and other tenants' events, make no task.
        async with asgi_client(app, await make_key("globex", "admin")) as other:
            await post(admin, type="job")
            await post(other, type="job")
            await define(admin, id="r", types=["job"], kind="k", queue="q")
            after = await post(admin, type="job")
            await post(other, type="job")
            await catch_up(app)
            assert (await other.get("/queues")).json()["queues"] == []
            state = (await other.get("/projections")).json()["projections"]
        assert (await queues(admin))["q"]["ready"] == 1
        created = await events_of_type(admin, "causeway.task.created")
        assert [e["causationid"] for e in created] == [after["id"]]
        assert {p["name"]: p["lag_events"] for p in state}["scheduler-dispatch"] == 0

    async def test_without_routes_only_a_route_definition_wakes_the_dispatcher(
        self, app: FastAPI, admin: Client
    ) -> None:
        # Every append sends a wake-up hint naming its types: with no route anywhere, the
        # dispatcher would wake for nothing (under load, a batch read per commit).
        runner = app.state.runner
        dispatcher = runner.projection("scheduler-dispatch")
        await post(admin, type="job")
        await catch_up(app)
        assert not runner.wakes(dispatcher, frozenset({"job"}))
        await define(admin, id="r", types=["job"], kind="k", queue="q")
        assert runner.wakes(dispatcher, frozenset({"causeway.route.defined"}))
        await catch_up(app)
        assert runner.wakes(dispatcher, frozenset({"job"}))
        assert runner.wakes(dispatcher, None)  # a hint too long to name its types

    async def test_the_schedulers_own_decisions_alone_do_not_wake_the_dispatcher(
        self, app: FastAPI, admin: Client
    ) -> None:
        # It never reads them (they come from the scheduler's source): a lease's append,
        # or a completion's without results, would wake it for nothing.
        runner = app.state.runner
        dispatcher = runner.projection("scheduler-dispatch")
        await define(admin, id="r", types=["job"], kind="k", queue="q")
        await catch_up(app)
        assert not runner.wakes(dispatcher, frozenset({"causeway.task.leased"}))
        done = frozenset({"causeway.task.completed", "causeway.task.created"})
        assert not runner.wakes(dispatcher, done)
        assert runner.wakes(dispatcher, done | {"job"})  # a result routes like any event
        assert runner.wakes(dispatcher, frozenset({"causeway.route.defined"}))

    async def test_a_deleted_route_routes_nothing_after_it(
        self, app: FastAPI, admin: Client
    ) -> None:
        await define(admin, id="audit", types=["a.*"], kind="log", queue="audit")
        await post(admin, type="a.one")
        response = await admin.request("DELETE", "/routes/audit")
        assert response.status_code == 200
        await post(admin, type="a.two")
        await catch_up(app)
        assert (await queues(admin))["audit"]["ready"] == 1
        assert (await admin.get("/routes")).json()["routes"] == []

    @pytest.mark.parametrize(
        ("route", "detail"),
        [
            ({"id": "x", "types": ["a"], "where": ["room in ()"], "kind": "k", "queue": "q"}, "no values"),
            ({"id": "x", "types": ["a"], "where": ["room ~ b"], "kind": "k", "queue": "q"}, "is not one of"),
            ({"id": "x", "types": ["a"], "kind": "k"}, "both kind and queue"),
            ({"id": "x", "types": ["a"], "kind": "k", "queue": "q", "priority": 12}, "priority"),
            ({"id": "x", "types": ["causeway.task.created"], "kind": "k", "queue": "q"}, "cannot be routed"),
            ({"id": "bad id", "types": ["a"], "kind": "k", "queue": "q"}, "id must be"),
            ({"id": "x", "types": ["a"], "kind": "k", "queue": "q", "priorty": 9}, "unknown route field"),
            ({"id": "x", "types": ["a"], "kind": "k", "queue": "q", "requires": {"g": 1e400}}, "requires.g"),
            ({"id": "x", "types": ["a"], "kind": "k", "queue": "q", "requires": {"g": 10**400}}, "requires.g"),
            ({"id": "x", "types": ["a\u0000"], "kind": "k", "queue": "q"}, "U+0000"),
            ({"id": "x", "types": ["a"], "kind": "k", "queue": "q", "on_model_mismatch": "rollback"}, "needs the deployment service"),
        ],
    )  # fmt: skip
    async def test_a_bad_route_is_a_problem_naming_what_is_wrong(
        self, admin: Client, route: dict[str, Any], detail: str
    ) -> None:
        # The standard library writes what orjson cannot (1e400 as Infinity, huge integers).
        response = await admin.post("/routes", content=json.dumps(route), headers=JSON)
        assert response.status_code == 400
        assert response.headers["content-type"] == "application/problem+json"
        assert detail in response.json()["detail"]

    async def test_what_the_scheduler_writes_never_routes_back_into_it(
        self, app: FastAPI, admin: Client
    ) -> None:
        await define(
            admin, id="loop", types=["home.x", "causeway.*"],
            prewarm={"model": "m", "count": 1, "within_s": 10},
        )  # fmt: skip
        await post(admin, type="home.x")
        for _ in range(3):
            await catch_up(app)
        assert len(await events_of_type(admin, "causeway.model.prewarm_requested")) == 1

    async def test_routes_and_leases_need_their_scopes(
        self, app: FastAPI, make_key: MakeKey, client: Client
    ) -> None:
        route = {"id": "x", "types": ["a"], "kind": "k", "queue": "q"}
        assert (await client.post("/routes", content=dumps(route), headers=JSON)).status_code == 403
        refused = await client.post("/queues/q/lease", content=dumps({"worker": "w"}), headers=JSON)
        assert refused.status_code == 403
        assert refused.json()["required"] == "worker"
