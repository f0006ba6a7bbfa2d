"""The dispatcher across route changes and the scheduler's own writes: a route defined
again (or deleted and defined again) starts its pre-warm windows empty, rather than
counting events an earlier definition matched; and the scheduler's own rollback of a
service (a task's model mismatch) feeds no route, where a route of rollbacks whose tasks
roll back on a mismatch walked the service down through every stable version."""

from __future__ import annotations

from fastapi import FastAPI

from tests.integration.conftest import catch_up
from tests.integration.scheduler.conftest import (
    Client,
    define,
    events_of_type,
    fail,
    lease,
    post,
    three_stable_versions_and_a_rollback_route,
)


class TestPrewarmWindowsAcrossRouteChanges:
    async def test_a_redefined_route_does_not_count_events_its_old_definition_matched(
        self, app: FastAPI, admin: Client
    ) -> None:
        """'defining it again replaces it': the replaced definition (other types, other
        model) must not lend its counted events to the new one. One door event must not
        pre-warm 'locks' when the route asks for two."""
        await define(admin, id="warm", types=["camera.motion"],
                     prewarm={"model": "faces", "count": 2, "within_s": 60})  # fmt: skip
        await post(admin, type="camera.motion", source="/site/1", time="2026-11-30T12:00:00Z")
        await catch_up(app)
        await define(admin, id="warm", types=["door.opened"],
                     prewarm={"model": "locks", "count": 2, "within_s": 60})  # fmt: skip
        await post(admin, type="door.opened", source="/site/1", time="2026-11-30T12:00:10Z")
        await catch_up(app)
        requested = await events_of_type(admin, "causeway.model.prewarm_requested")
        assert requested == [], [(e["data"]["model"], e["causationid"]) for e in requested]

    async def test_a_deleted_route_leaves_no_count_behind_for_its_successor(
        self, app: FastAPI, admin: Client
    ) -> None:
        route = {"types": ["camera.motion"],
                 "prewarm": {"model": "faces", "count": 2, "within_s": 60}}  # fmt: skip
        await define(admin, id="warm", **route)
        await post(admin, type="camera.motion", source="/cam/1", time="2026-11-30T12:00:00Z")
        await catch_up(app)
        assert (await admin.request("DELETE", "/routes/warm")).status_code == 200
        await catch_up(app)
        await define(admin, id="warm", **route)
        await post(admin, type="camera.motion", source="/cam/1", time="2026-11-30T12:00:05Z")
        await catch_up(app)
        requested = await events_of_type(admin, "causeway.model.prewarm_requested")
        assert requested == [], [e["causationid"] for e in requested]


class TestTheSchedulersOwnWrites:
    async def test_a_rollback_the_scheduler_writes_feeds_no_route(
        self, app: FastAPI, admin: Client, worker: Client
    ) -> None:
        """docs/scheduler.md: what the scheduler writes never matches, 'so no route feeds
        itself'. Its model-mismatch rollbacks (causeway.deployment.rolled_back, written
        under source causeway:deployments) do match, and a route on them that rolls back
        on mismatch walks the service down: one failed frame took 'gate' from 3 to 1."""
        await three_stable_versions_and_a_rollback_route(admin)
        await define(admin, id="watch", types=["causeway.deployment.*"], kind="k", queue="q2",
                     max_retries=0, service="gate", on_model_mismatch="rollback")  # fmt: skip
        await post(admin, type="frame")
        await catch_up(app)
        leased = await lease(worker, "q")
        assert leased is not None
        await fail(worker, leased, "model_version_mismatch")  # the scheduler rolls 3 -> 2
        await catch_up(app)
        fed = await lease(worker, "q2")
        if fed is not None:
            await fail(worker, fed, "model_version_mismatch")
            await catch_up(app)
        stable = (await admin.get("/deployments/gate")).json()["stable_version"]
        assert fed is None, (
            f"a task was made from the scheduler's own {fed['trigger']['type']} "
            f"(by {fed['trigger']['data']['actor']}); gate is now at version {stable}"
        )


async def test_a_route_defined_again_identically_keeps_its_prewarm_count(
    app: FastAPI, admin: Client
) -> None:
    """A deploy that applies every route again is no change: the events counted stay
    counted (emptied at every definition, a re-apply more often than within_s kept any
    pre-warm from ever being asked for)."""
    route = {"types": ["camera.motion"], "prewarm": {"model": "faces", "count": 2, "within_s": 60}}
    await define(admin, id="warm", **route)
    await post(admin, type="camera.motion", source="/cam/1", time="2026-11-30T12:00:00Z")
    await catch_up(app)
    await define(admin, id="warm", **route)  # the same definition, applied again
    await post(admin, type="camera.motion", source="/cam/1", time="2026-11-30T12:00:05Z")
    await catch_up(app)
    assert len(await events_of_type(admin, "causeway.model.prewarm_requested")) == 1
