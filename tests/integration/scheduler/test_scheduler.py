"""The scheduler over HTTP on a real PostgreSQL: routing, leasing, retries, the dead-letter
queue, debounce, pre-warming, signals, and the queue rebuilt from the log."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from hashlib import sha256
from typing import Any

import httpx2
import orjson
import pytest
from fastapi import FastAPI
from sqlalchemy import URL, func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.tables import log_head, tasks
from app.main import create_app, dispose
from app.settings import Settings
from app.store.log import EventLog
from app.store.verify import verify_chain
from scheduler import tasks as t
from scheduler.rows.tasks import fetch_task
from scheduler.service import SchedulerLoop, SchedulerTimers
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import JSON, STRUCTURED, dumps, event, registration

Client = httpx2.AsyncClient
# 6,400 characters that look random (and so do not compress), the same in every process.
LONG_KEY = base64.b64encode(b"".join(sha256(bytes([i])).digest() for i in range(150))).decode()
NOW = "2026-11-30T12:00:00+00:00"


@pytest.fixture
async def worker(app: FastAPI, make_key: MakeKey) -> AsyncIterator[Client]:
    async with asgi_client(app, await make_key("acme", "worker")) as client:
        yield client


async def define(admin: Client, **route: Any) -> dict[str, Any]:
    response = await admin.post("/routes", content=dumps(route), headers=JSON)
    assert response.status_code == 201, response.text
    return dict(response.json())


async def queued(app: FastAPI, admin: Client, jobs: int = 1, **route: Any) -> None:
    """Route ``job`` events to queue ``q`` (``route`` overrides), post ``jobs`` of them,
    and let the dispatcher make their tasks."""
    await define(admin, **{"id": "r", "types": ["job"], "kind": "k", "queue": "q", **route})
    for _ in range(jobs):
        await post(admin, type="job")
    await catch_up(app)


async def post(client: Client, **attributes: Any) -> dict[str, Any]:
    body = event(**attributes)
    response = await client.post("/events", content=dumps(body), headers=STRUCTURED)
    assert response.status_code == 201, response.text
    return body


async def three_stable_versions_and_a_rollback_route(admin: Client) -> None:
    """Service ``gate`` promoted through versions 1, 2 and 3 of ``faces``, and a route of
    ``frame`` events whose model mismatches roll it back."""
    for version in ("1", "2", "3"):
        await admin.post("/models/faces/versions", content=registration(version), headers=JSON)
    for version in ("1", "2", "3"):
        body = {"model": "faces", "version": version, "percent": 100}
        await admin.post("/deployments/gate/rollouts", content=dumps(body), headers=JSON)
        await admin.post("/deployments/gate/promote", content=b"{}", headers=JSON)
    await define(
        admin, id="r", types=["frame"], kind="k", queue="q", max_retries=0,
        service="gate", on_model_mismatch="rollback",
    )  # fmt: skip


async def lease(client: Client, queue: str, **profile: Any) -> dict[str, Any] | None:
    body = {"worker": "w1", **profile}
    response = await client.post(f"/queues/{queue}/lease", content=dumps(body), headers=JSON)
    if response.status_code == 204:
        return None
    assert response.status_code == 200, response.text
    return dict(response.json())


async def heartbeat(client: Client, leased: dict[str, Any], **body: Any) -> httpx2.Response:
    return await client.post(
        f"/tasks/{leased['task']['id']}/heartbeat",
        content=dumps({"lease": leased["lease"], **body}),
        headers=JSON,
    )


async def fail(client: Client, leased: dict[str, Any], error_class: str) -> dict[str, Any]:
    response = await client.post(
        f"/tasks/{leased['task']['id']}/fail",
        content=dumps({"lease": leased["lease"], "class": error_class, "message": "boom"}),
        headers=JSON,
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


async def queues(client: Client) -> dict[str, dict[str, Any]]:
    return {q["queue"]: q for q in (await client.get("/queues")).json()["queues"]}


async def events_of_type(client: Client, event_type: str) -> list[dict[str, Any]]:
    response = await client.get("/replay", params={"types": event_type})
    return [orjson.loads(line) for line in response.text.splitlines() if line]


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


class TestLeasing:
    @pytest.mark.parametrize(
        "capabilities",
        [b'{"g": 1e400}', b'{"g": NaN}', b'{"g": Infinity}'],
    )
    async def test_a_capability_no_float_holds_is_refused(
        self, worker: Client, capabilities: bytes
    ) -> None:
        body = b'{"worker": "w1", "capabilities": ' + capabilities + b"}"
        response = await worker.post("/queues/q/lease", content=body, headers=JSON)
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith("application/problem+json")

    async def test_a_long_poll_waits_all_of_wait_s(self, worker: Client) -> None:
        # It gave up up to half a second early: a task turning ready then was not offered.
        started = asyncio.get_running_loop().time()
        body = dumps({"worker": "w1", "wait_s": 1})
        response = await worker.post("/queues/empty/lease", content=body, headers=JSON)
        assert response.status_code == 204
        assert asyncio.get_running_loop().time() - started >= 1.0

    async def test_a_capability_past_64_bits_is_a_number_like_any(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await queued(app, admin, requires={"g": 8})
        body = b'{"worker": "w1", "capabilities": {"g": 100000000000000000000000000000}}'
        response = await worker.post("/queues/q/lease", content=body, headers=JSON)
        assert response.status_code == 200, response.text

    async def test_priority_then_age_and_requirements(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await define(admin, id="any", types=["job"], kind="infer", queue="gpu")
        await define(
            admin, id="big", types=["job.big"], kind="infer", queue="gpu", priority=9,
            requires={"gpu_memory_gb": 16, "fp16": True, "labels": {"zone": "a"}},
        )  # fmt: skip
        low = await post(admin, type="job", priority="2")
        high = await post(admin, type="job", priority="6")
        high_later = await post(admin, type="job", priority="6")
        big = await post(admin, type="job.big")
        await catch_up(app)

        small = {"capabilities": {"gpu_memory_gb": 8, "fp16": True}, "labels": {"zone": "a"}}
        order = [(await lease(worker, "gpu", **small)) for _ in range(4)]
        assert [o["trigger"]["id"] if o else None for o in order] == [
            high["id"], high_later["id"], low["id"], None,
        ]  # fmt: skip
        wrong_zone = {"capabilities": {"gpu_memory_gb": 24, "fp16": True}, "labels": {"zone": "b"}}
        assert await lease(worker, "gpu", **wrong_zone) is None
        no_fp16 = {"capabilities": {"gpu_memory_gb": 24, "fp16": False}, "labels": {"zone": "a"}}
        assert await lease(worker, "gpu", **no_fp16) is None
        fits = {"capabilities": {"gpu_memory_gb": 24, "fp16": True}, "labels": {"zone": "a"}}
        got = await lease(worker, "gpu", **fits)
        assert got is not None
        assert got["trigger"]["id"] == big["id"]
        assert got["task"]["guaranteed"] is True

    async def test_a_requirement_of_zero_asks_for_nothing(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await define(admin, id="r", types=["job"], kind="k", queue="q", requires={"cpu": 0})
        await post(admin, type="job")
        await catch_up(app)
        assert await lease(worker, "q") is not None  # a worker that reports no cpu at all

    async def test_guaranteed_work_never_goes_to_spot_workers(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await define(admin, id="r", types=["job"], kind="infer", queue="q")
        await post(admin, type="job", priority="9")
        await catch_up(app)
        assert await lease(worker, "q", spot=True) is None
        assert await lease(worker, "q", spot=False) is not None

    async def test_off_peak_keeps_low_priority_work_for_spot_workers(
        self, database_url: URL, make_key: MakeKey
    ) -> None:
        settings = Settings(_env_file=None, scheduler_off_peak_hours="0-24")
        app = create_app(settings, database_url=database_url)
        try:
            async with asgi_client(app, await make_key("acme", "admin")) as admin:
                await define(admin, id="r", types=["job"], kind="batch", queue="q")
                low = await post(admin, type="job", priority="1")
                normal = await post(admin, type="job", priority="5")
                await catch_up(app)
                on_demand = await lease(admin, "q")
                assert on_demand is not None
                assert on_demand["trigger"]["id"] == normal["id"]
                assert await lease(admin, "q") is None
                spot = await lease(admin, "q", spot=True)
                assert spot is not None
                assert spot["trigger"]["id"] == low["id"]
        finally:
            await dispose(app)

    async def test_an_expired_lease_is_delivered_again_and_counts_an_attempt(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await queued(app, admin, kind="infer")
        first = await lease(worker, "q", lease_s=0.2)
        assert first is not None
        assert first["task"]["attempts"] == 1
        beat = await worker.post(
            f"/tasks/{first['task']['id']}/heartbeat",
            content=dumps({"lease": first["lease"], "lease_s": 0.3}),
            headers=JSON,
        )
        assert beat.status_code == 200
        await asyncio.sleep(0.4)
        sweeper = SchedulerLoop(
            app.state.engine, app.state.scheduler_controller, SchedulerTimers(), app.state.decisions
        )
        assert await sweeper.expire_leases() == 1
        second = await lease(worker, "q", worker="w2")
        assert second is not None
        assert second["task"]["id"] == first["task"]["id"]
        assert second["task"]["attempts"] == 2
        late = await worker.post(
            f"/tasks/{first['task']['id']}/complete",
            content=dumps({"lease": first["lease"], "events": []}),
            headers=JSON,
        )
        assert late.status_code == 409
        assert late.json()["type"].endswith("/lease-lost")

    async def test_sixteen_concurrent_leasers_never_share_a_task(
        self, database_url: URL, make_key: MakeKey
    ) -> None:
        settings = Settings(_env_file=None, db_pool_size=16)
        app = create_app(settings, database_url=database_url)
        try:
            async with asgi_client(app, await make_key("acme", "admin")) as admin:
                await define(admin, id="r", types=["job"], kind="infer", queue="q")
                batch = [event(type="job") for _ in range(160)]
                response = await admin.post(
                    "/events",
                    content=dumps(batch),
                    headers={"Content-Type": "application/cloudevents-batch+json"},
                )
                assert response.status_code == 201
                await catch_up(app)

                async def leaser(n: int) -> list[str]:
                    got = []
                    while (leased := await lease(admin, "q", worker=f"w{n}")) is not None:
                        got.append(leased["task"]["id"])
                    return got

                found = await asyncio.gather(*(leaser(n) for n in range(16)))
            every = [task for got in found for task in got]
            assert len(every) == len(set(every)) == 160
            assert sum(1 for got in found if got) > 1  # they really ran side by side
        finally:
            await dispose(app)


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

    async def test_a_heartbeat_extends_a_lease_and_never_shortens_it(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await queued(app, admin)
        leased = await lease(worker, "q", lease_s=600)
        assert leased is not None
        granted = datetime.fromisoformat(leased["task"]["lease_expires_at"])

        async def beat(**body: Any) -> datetime:
            response = await heartbeat(worker, leased, **body)
            assert response.status_code == 200, response.text
            return datetime.fromisoformat(response.json()["lease_expires_at"])

        # Without lease_s: as long again as the lease was granted for (not the 30 s default).
        extended = await beat()
        assert granted <= extended <= datetime.now(UTC) + timedelta(seconds=600)
        assert extended > datetime.now(UTC) + timedelta(seconds=590)
        assert await beat(lease_s=1) == extended  # shorter than what is left: kept
        await asyncio.sleep(1.2)
        sweeper = SchedulerLoop(
            app.state.engine, app.state.scheduler_controller, SchedulerTimers(), app.state.decisions
        )
        assert await sweeper.expire_leases() == 0
        task = (await admin.get(f"/tasks/{leased['task']['id']}")).json()
        assert (task["state"], task["attempts"]) == ("leased", 1)

    async def test_an_expired_lease_is_lost_even_before_the_sweeper_runs(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await queued(app, admin)
        leased = await lease(worker, "q", lease_s=0.1)
        assert leased is not None
        await asyncio.sleep(0.2)
        beat = await heartbeat(worker, leased)
        assert beat.status_code == 409
        assert "expired" in beat.json()["detail"]


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
        assert "infinite" in response.json()["detail"]

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


class TestRetriesAndDeadLetters:
    async def test_failures_back_off_then_dead_letter_and_flag(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await define(
            admin, id="r", types=["job"], kind="k", queue="q", max_retries=2, backoff_base_s=0.2
        )
        await post(admin, type="job")
        await catch_up(app)
        delays = []
        for attempt in (1, 2):
            leased = await lease(worker, "q")
            assert leased is not None
            assert leased["task"]["attempts"] == attempt
            failed = await fail(worker, leased, "transient")
            assert failed["state"] == "ready"
            assert await lease(worker, "q") is None  # invisible until its retry time
            history = (await admin.get(f"/tasks/{leased['task']['id']}")).json()["history"]
            delays.append(history[-1]["data"]["delay_s"])
            await asyncio.sleep(delays[-1] + 0.05)
        assert 0.2 <= delays[0] <= 0.25
        assert 0.4 <= delays[1] <= 0.5
        last = await lease(worker, "q")
        assert last is not None
        dead = await fail(worker, last, "transient")
        assert (dead["state"], dead["disposition"]) == ("dead", "flagged")
        alerts = await events_of_type(admin, "causeway.alert.raised")
        assert [a["data"]["kind"] for a in alerts] == ["dead_letter"]
        listed = (await admin.get("/dead-letters", params={"class": "transient"})).json()
        assert [d["id"] for d in listed["dead_letters"]] == [last["task"]["id"]]
        assert (await admin.get("/dead-letters", params={"class": "data_invalid"})).json()[
            "dead_letters"
        ] == []
        one = (await admin.get(f"/dead-letters/{last['task']['id']}")).json()
        assert [(a["attempt"], a["outcome"], a["class"]) for a in one["failures"]] == [
            (1, "retried", "transient"), (2, "retried", "transient"), (3, "dead_lettered", "transient"),
        ]  # fmt: skip
        assert one["attempts"] == 3  # a count, as GET /dead-letters says it
        assert one["trigger_event"]["type"] == "job"
        assert (await queues(admin))["q"]["dead_letters"] == 1
        metrics = (await admin.get("/metrics")).text
        assert 'causeway_queue_dead_letters{queue="q"} 1.0' in metrics
        assert 'causeway_queue_alerts{queue="q"} 1.0' in metrics

        requeued = await admin.post(
            f"/dead-letters/{last['task']['id']}/requeue", content=b"{}", headers=JSON
        )
        assert (requeued.json()["state"], requeued.json()["attempts"]) == ("ready", 0)
        again = await lease(worker, "q")
        assert again is not None
        await worker.post(
            f"/tasks/{again['task']['id']}/fail",
            content=dumps({"lease": again["lease"], "class": "unknown", "message": "x"}),
            headers=JSON,
        )

    async def test_invalid_data_is_archived_with_its_input_for_training(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await define(admin, id="r", types=["job"], kind="k", queue="q", max_retries=0)
        trigger = await post(admin, type="job", data={"pixels": [1, 2, 3]})
        await catch_up(app)
        leased = await lease(worker, "q")
        assert leased is not None
        dead = await fail(worker, leased, "data_invalid")
        assert dead["disposition"] == "archived"
        [archived] = await events_of_type(admin, "causeway.task.dead_lettered")
        assert archived["data"]["input"]["id"] == trigger["id"]
        assert archived["data"]["input"]["data"] == {"pixels": [1, 2, 3]}
        discarded = await admin.post(
            f"/dead-letters/{leased['task']['id']}/discard",
            content=dumps({"reason": "kept in the archive"}),
            headers=JSON,
        )
        assert discarded.json()["state"] == "discarded"
        again = await admin.post(
            f"/dead-letters/{leased['task']['id']}/requeue", content=b"{}", headers=JSON
        )
        assert again.status_code == 409

    async def test_binary_data_is_archived_too(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        png = base64.b64encode(b"\x89PNG\r\n\x1a\n\x00\xff").decode()
        await define(admin, id="r", types=["frame"], kind="k", queue="q", max_retries=0)
        trigger = await post(
            admin, type="frame", datacontenttype="image/png", data=..., data_base64=png
        )
        await catch_up(app)
        leased = await lease(worker, "q")
        assert leased is not None
        assert (await fail(worker, leased, "data_invalid"))["disposition"] == "archived"
        [archived] = await events_of_type(admin, "causeway.task.dead_lettered")
        assert archived["data"]["input"] == {
            "id": trigger["id"],
            "type": "frame",
            "source": trigger["source"],
            "datacontenttype": "image/png",
            "data_base64": png,
        }

    async def test_a_model_mismatch_rolls_the_service_back_and_requeues(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        for version in ("1", "2"):
            await admin.post("/models/faces/versions", content=registration(version), headers=JSON)
        for action, body in (
            ("rollouts", {"model": "faces", "version": "1"}),
            ("promote", {}),
            ("rollouts", {"model": "faces", "version": "2", "percent": 100}),
            ("promote", {}),
        ):
            response = await admin.post(
                f"/deployments/gate/{action}", content=dumps(body), headers=JSON
            )
            assert response.status_code == 200, response.text
        await define(
            admin, id="r", types=["frame"], kind="recognise", queue="q", max_retries=0,
            service="gate", on_model_mismatch="rollback",
        )  # fmt: skip
        await post(admin, type="frame")
        await catch_up(app)
        leased = await lease(worker, "q")
        assert leased is not None
        after = await fail(worker, leased, "model_version_mismatch")
        assert after["state"] == "ready"  # requeued behind the rollback
        await catch_up(app)
        deployment = (await admin.get("/deployments/gate")).json()
        assert deployment["stable_version"] == "1"
        assert "model_version_mismatch" in deployment["history"][-1]["reason"]
        history = (await admin.get(f"/tasks/{leased['task']['id']}")).json()["history"]
        assert [h["type"].rsplit(".", 1)[1] for h in history][-2:] == ["dead_lettered", "requeued"]

    async def test_mismatches_roll_a_service_back_once_not_once_each(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await three_stable_versions_and_a_rollback_route(admin)
        for _ in range(2):
            await post(admin, type="frame")
        await catch_up(app)
        first, second = await lease(worker, "q"), await lease(worker, "q")
        assert first is not None
        assert second is not None
        assert (await fail(worker, first, "model_version_mismatch"))["state"] == "ready"
        after = await fail(worker, second, "model_version_mismatch")
        assert after["state"] == "ready"  # requeued: the service changed since it ran
        history = (await admin.get(f"/tasks/{second['task']['id']}")).json()["history"]
        assert history[-2]["data"]["disposition"] == "deployment_changed"
        await catch_up(app)
        assert (await admin.get("/deployments/gate")).json()["stable_version"] == "2"

    async def test_a_task_rolls_its_service_back_once_however_often_it_fails(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        """A task that fails again on the deployment its own rollback left is flagged:
        it does not walk the service back through every stable version it had."""
        await three_stable_versions_and_a_rollback_route(admin)
        await post(admin, type="frame")
        await catch_up(app)
        leased = await lease(worker, "q")
        assert leased is not None
        assert (await fail(worker, leased, "model_version_mismatch"))["state"] == "ready"
        again = await lease(worker, "q")
        assert again is not None
        dead = await fail(worker, again, "model_version_mismatch")
        assert (dead["state"], dead["disposition"]) == ("dead", "flagged")
        await catch_up(app)
        assert (await admin.get("/deployments/gate")).json()["stable_version"] == "2"
        rollbacks = await events_of_type(admin, "causeway.deployment.rolled_back")
        assert len(rollbacks) == 1
        alerts = await events_of_type(admin, "causeway.alert.raised")
        assert "rolled service 'gate' back once already" in alerts[-1]["data"]["why"]
        assert (await queues(admin))["q"]["alerts"] == 1
        # Once the service has changed since (an operator rolled a version out), the
        # task's next mismatch is about that deployment: it may roll back again.
        body = {"model": "faces", "version": "3", "percent": 100}
        await admin.post("/deployments/gate/rollouts", content=dumps(body), headers=JSON)
        await admin.post("/deployments/gate/promote", content=b"{}", headers=JSON)
        task = leased["task"]["id"]
        await admin.post(f"/dead-letters/{task}/requeue", content=b"{}", headers=JSON)
        third = await lease(worker, "q")
        assert third is not None
        assert (await fail(worker, third, "model_version_mismatch"))["state"] == "ready"
        assert len(await events_of_type(admin, "causeway.deployment.rolled_back")) == 2

    async def test_a_rollback_with_nothing_to_roll_back_to_is_recorded_so(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await define(
            admin, id="r", types=["frame"], kind="k", queue="q", max_retries=0,
            service="nowhere", on_model_mismatch="rollback",
        )  # fmt: skip
        await post(admin, type="frame")
        await catch_up(app)
        leased = await lease(worker, "q")
        assert leased is not None
        dead = await fail(worker, leased, "model_version_mismatch")
        assert (dead["state"], dead["disposition"]) == ("dead", "rollback_failed")
        assert (await queues(admin))["q"]["alerts"] == 1

    async def test_a_model_mismatch_only_proposes_a_rollback_by_default(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        await define(
            admin, id="r", types=["frame"], kind="k", queue="q", max_retries=0, service="gate"
        )
        await post(admin, type="frame")
        await catch_up(app)
        leased = await lease(worker, "q")
        assert leased is not None
        dead = await fail(worker, leased, "model_version_mismatch")
        assert (dead["state"], dead["disposition"]) == ("dead", "rollback_proposed")
        [proposal] = await events_of_type(admin, "causeway.alert.raised")
        assert (proposal["data"]["kind"], proposal["data"]["service"]) == (
            "rollback_proposed",
            "gate",
        )


class TestDebounceAndPrewarm:
    @pytest.mark.parametrize("at", ["0001-01-01T00:00:01Z", "9999-12-31T23:59:59Z"])
    async def test_an_event_at_the_ends_of_time_does_not_stop_the_dispatcher(
        self, app: FastAPI, admin: Client, at: str
    ) -> None:
        # A window of 5 s around it runs past the years a datetime holds.
        await define(admin, id="r", types=["job"], kind="k", queue="q",
                     debounce={"key": "user_id", "window_s": 5})  # fmt: skip
        await post(admin, type="job", time=at, data={"user_id": "u1"})
        await post(admin, type="job", data={"user_id": "u2"})
        await catch_up(app)
        assert (await queues(admin))["q"]["ready"] == 2

    # A key longer than a btree entry holds (2704 bytes) stopped the dispatcher at its
    # event, for every tenant. Random: a long value that compresses would have fitted.
    @pytest.mark.parametrize("ann", ["ann", LONG_KEY], ids=["short", "long"])
    async def test_a_newer_event_with_the_same_key_supersedes_the_pending_task(
        self, app: FastAPI, admin: Client, worker: Client, ann: str
    ) -> None:
        await define(
            admin, id="r", types=["profile.changed"], kind="reindex", queue="q",
            debounce={"key": "user_id", "window_s": 60},
        )  # fmt: skip
        await post(admin, type="profile.changed", data={"user_id": ann, "n": 1})
        newer = await post(admin, type="profile.changed", data={"user_id": ann, "n": 2})
        other = await post(admin, type="profile.changed", data={"user_id": ann + "-bob"})
        await catch_up(app)
        assert (await queues(admin))["q"]["ready"] == 2
        got = {(await lease(worker, "q"))["trigger"]["id"] for _ in range(2)}  # type: ignore[index]
        assert got == {newer["id"], other["id"]}
        [superseded] = await events_of_type(admin, "causeway.task.superseded")
        assert newer["id"] in superseded["causationid"].split(",")

    async def test_a_late_event_older_than_the_pending_one_is_superseded_at_once(
        self, app: FastAPI, admin: Client
    ) -> None:
        await define(
            admin, id="r", types=["profile.changed"], kind="reindex", queue="q",
            debounce={"key": "user_id", "window_s": 60},
        )  # fmt: skip
        newer = await post(
            admin, type="profile.changed", time="2026-11-30T12:00:01Z", data={"user_id": "u"}
        )
        await post(
            admin, type="profile.changed", time="2026-11-30T12:00:00Z", data={"user_id": "u"}
        )
        await catch_up(app)
        assert (await queues(admin))["q"]["ready"] == 1
        [superseded] = await events_of_type(admin, "causeway.task.superseded")
        assert superseded["causationid"].split(",")[-1] == newer["id"]

    async def test_enough_events_from_one_source_ask_for_a_prewarm(
        self, app: FastAPI, admin: Client
    ) -> None:
        await define(
            admin, id="warm", types=["camera.motion"],
            prewarm={"model": "face-recognition", "count": 3, "within_s": 60},
        )  # fmt: skip
        motions = [await post(admin, type="camera.motion", source="/cam/1") for _ in range(3)]
        await post(admin, type="camera.motion", source="/cam/2")
        await catch_up(app)
        [request] = await events_of_type(admin, "causeway.model.prewarm_requested")
        assert request["data"]["model"] == "face-recognition"
        assert request["causationid"].split(",") == [m["id"] for m in motions]


class TestQueueState:
    async def test_the_queue_rebuilt_from_the_log_equals_the_live_one(
        self, app: FastAPI, admin: Client, worker: Client, engine: AsyncEngine
    ) -> None:
        await define(admin, id="r", types=["job"], kind="k", queue="q", max_retries=1)
        for n in range(6):
            await post(admin, type="job", data={"n": n})
        await catch_up(app)
        first = await lease(worker, "q")
        second = await lease(worker, "q")
        third = await lease(worker, "q")
        assert first
        assert second
        assert third
        await worker.post(
            f"/tasks/{first['task']['id']}/complete",
            content=dumps({"lease": first["lease"], "events": [event(type="done")]}),
            headers=JSON,
        )
        await fail(worker, second, "transient")

        async def snapshot() -> list[Any]:
            async with engine.connect() as conn:
                return [tuple(r) for r in await conn.execute(select(tasks).order_by(tasks.c.id))]

        live = await snapshot()
        rebuilt = await app.state.runner.rebuild(app.state.runner.projection("scheduler-tasks"))
        assert rebuilt > 0
        assert await snapshot() == live

    async def test_a_completion_that_waited_for_a_rebuild_finds_the_rebuilt_row(
        self, app: FastAPI, admin: Client, worker: Client, engine: AsyncEngine
    ) -> None:
        # A rebuild deletes every row and inserts it again, in one transaction. A command
        # that waited for the row's lock used to find it gone: a 404 for a held lease.
        await queued(app, admin)
        leased = await lease(worker, "q")
        assert leased
        task_id = leased["task"]["id"]
        async with engine.connect() as rebuild:
            await rebuild.execute(text("BEGIN"))
            await rebuild.execute(
                text(
                    "WITH gone AS (DELETE FROM tasks WHERE id = :id RETURNING *) "
                    "INSERT INTO tasks SELECT * FROM gone"
                ),
                {"id": task_id},
            )
            completing = asyncio.create_task(
                worker.post(
                    f"/tasks/{task_id}/complete",
                    content=dumps({"lease": leased["lease"], "events": [event(type="done")]}),
                    headers=JSON,
                )
            )
            await asyncio.sleep(0.5)  # waiting for the row's lock
            assert not completing.done()
            await rebuild.execute(text("COMMIT"))
        response = await completing
        assert response.status_code == 200, response.text
        assert response.json()["state"] == "completed"

    async def test_finished_tasks_rows_go_after_the_retention_their_decisions_stay(
        self, app: FastAPI, admin: Client, worker: Client, engine: AsyncEngine
    ) -> None:
        await queued(app, admin, jobs=3, max_retries=0)
        done, dead, recent = [await lease(worker, "q") for _ in range(3)]
        assert done
        assert dead
        assert recent
        for leased in (done, recent):
            response = await worker.post(
                f"/tasks/{leased['task']['id']}/complete",
                content=dumps({"lease": leased["lease"], "events": []}),
                headers=JSON,
            )
            assert response.status_code == 200, response.text
        await fail(worker, dead, "data_invalid")  # dead-lettered at once
        async with engine.begin() as conn:  # two of them finished 8 days ago
            await conn.execute(
                tasks.update()
                .where(tasks.c.id.in_([done["task"]["id"], dead["task"]["id"]]))
                .values(finished_at=func.now() - timedelta(days=8))
            )
        week = SchedulerTimers(task_retention_s=7 * 86_400)
        state = app.state
        sweeper = SchedulerLoop(state.engine, state.scheduler_controller, week, state.decisions)
        assert await sweeper.prune_finished() == 0  # the task rows' projection is behind
        await catch_up(app)
        assert await sweeper.prune_finished() == 1
        gone = await admin.get(f"/tasks/{done['task']['id']}")
        assert gone.status_code == 404
        assert (await admin.get(f"/tasks/{dead['task']['id']}")).json()["state"] == "dead"
        discarded = await admin.post(  # finished now, 8 days after it died: kept a week more
            f"/dead-letters/{dead['task']['id']}/discard",
            content=dumps({"reason": "r"}),
            headers=JSON,
        )
        assert discarded.status_code == 200, discarded.text
        await catch_up(app)
        assert await sweeper.prune_finished() == 0
        assert (await admin.get(f"/tasks/{recent['task']['id']}")).json()["state"] == "completed"
        stream = f"causeway:task:{done['task']['id']}"
        history = (await admin.get("/replay", params={"stream": stream})).text.splitlines()
        assert orjson.loads(history[-1])["type"] == "causeway.task.completed"
        # A dispatcher replayed from the start finds the task made, in the log, not again.
        runner = app.state.runner
        await runner.rebuild(runner.projection("scheduler-dispatch"))
        assert len(await events_of_type(admin, "causeway.task.created")) == 3
        assert (await admin.get(f"/tasks/{done['task']['id']}")).status_code == 404
        forever = SchedulerLoop(
            state.engine, state.scheduler_controller, SchedulerTimers(), state.decisions
        )
        assert await forever.prune_finished() == 0

    async def test_a_row_whose_write_was_lost_catches_up_from_the_log(
        self, app: FastAPI, admin: Client, worker: Client, engine: AsyncEngine
    ) -> None:
        await queued(app, admin)
        async with engine.begin() as conn:
            [row] = (await conn.execute(select(tasks.c.id))).all()
            state = await fetch_task(conn, "acme", row.id)
            assert state is not None
            leased = {"lease": "l1", "worker": "gone", "attempt": 1, "expires_at": NOW}
            # A leased decision appended, its row never written: the process died between.
            await EventLog(conn).append(
                "acme", [t.decision(state, t.LEASED, leased, at=state.created_at)]
            )
        # The stale row cannot hand the task out again: its decision conflicts on the
        # task's stream, so the lease moves on and finds nothing else.
        assert await lease(worker, "q", worker="w2") is None
        await catch_up(app)  # the task table follows the log
        task = (await admin.get(f"/tasks/{row.id}")).json()
        assert (task["state"], task["worker"], task["attempts"]) == ("leased", "gone", 1)

    async def test_autoscale_advice_rises_with_latency_and_is_recorded(
        self, database_url: URL, make_key: MakeKey
    ) -> None:
        settings = Settings(
            _env_file=None, scheduler_target_latency_s=0.05, scheduler_autoscale_interval_s=0.1
        )
        app = create_app(settings, database_url=database_url)
        try:
            async with asgi_client(app, await make_key("acme", "admin")) as admin:
                await queued(app, admin, jobs=3)
                loop = SchedulerLoop(
                    app.state.engine,
                    app.state.scheduler_controller,
                    SchedulerTimers(autoscale_interval_s=0.1),
                    app.state.decisions,
                )
                await asyncio.sleep(0.5)  # the oldest task waits far past the 50 ms target
                assert await loop.advise() == 1
                advice = (await admin.get("/queues/q/autoscale")).json()
                assert advice["recommended_workers"] > 1
                assert advice["observed_latency_s"] >= 0.5
                [changed] = await events_of_type(admin, "causeway.queue.autoscale_changed")
                assert changed["data"]["recommended"] == advice["recommended_workers"]
        finally:
            await dispose(app)


class TestTenants:
    async def test_a_worker_of_another_tenant_sees_no_task(
        self, app: FastAPI, admin: Client, make_key: MakeKey
    ) -> None:
        await queued(app, admin)
        async with asgi_client(app, await make_key("globex", "worker,read")) as other:
            assert await lease(other, "q") is None
            assert (await other.get("/queues")).json()["queues"] == []
        async with asgi_client(app, await make_key("acme", "worker")) as own:
            leased = await lease(own, "q")
        assert leased is not None
        async with asgi_client(app, await make_key("globex", "worker")) as other:
            response = await other.post(
                f"/tasks/{leased['task']['id']}/fail",
                content=dumps({"lease": leased["lease"], "class": "unknown", "message": "x"}),
                headers=JSON,
            )
        assert response.status_code == 404
