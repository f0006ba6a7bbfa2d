"""Leasing over HTTP on a real PostgreSQL: placement by priority, age and
requirements, spot and off-peak bands, long polls, expiry, heartbeats, and tenants."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import URL

from app.main import create_app, dispose
from app.settings import Settings
from scheduler.service import SchedulerLoop, SchedulerTimers
from tests.integration.conftest import MakeKey, asgi_client, catch_up
from tests.integration.events import JSON, dumps, event
from tests.integration.scheduler.conftest import (
    Client,
    define,
    heartbeat,
    lease,
    post,
    queued,
)


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
        first = await lease(worker, "q", lease_s=1)
        assert first is not None
        assert first["task"]["attempts"] == 1
        beat = await worker.post(
            f"/tasks/{first['task']['id']}/heartbeat",
            content=dumps({"lease": first["lease"], "lease_s": 1.5}),
            headers=JSON,
        )
        assert beat.status_code == 200
        await asyncio.sleep(1.6)
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


class TestHeartbeats:
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
