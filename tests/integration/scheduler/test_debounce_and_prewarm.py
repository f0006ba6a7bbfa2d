"""Debouncing and pre-warming by the dispatcher on a real PostgreSQL: newer events
supersede pending tasks with their key, and enough events ask for a pre-warm."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from tests.integration.conftest import catch_up
from tests.integration.scheduler.conftest import (
    LONG_KEY,
    Client,
    define,
    events_of_type,
    lease,
    post,
    queues,
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

    async def test_a_route_debouncing_on_another_attribute_supersedes_nothing_keyed_before(
        self, app: FastAPI, admin: Client
    ) -> None:
        """The route's key changes from user_id to device_id (defining a route again
        replaces it): an event from device 42 is no newer version of the work pending for
        user 42, which it superseded, so that work never ran."""
        await define(
            admin, id="r", types=["changed"], kind="k", queue="q",
            debounce={"key": "user_id", "window_s": 60},
        )  # fmt: skip
        await post(admin, type="changed", data={"user_id": "42", "device_id": "7"})
        await catch_up(app)
        await define(
            admin, id="r", types=["changed"], kind="k", queue="q",
            debounce={"key": "device_id", "window_s": 60},
        )  # fmt: skip
        await post(admin, type="changed", data={"user_id": "1", "device_id": "42"})
        await post(admin, type="changed", data={"user_id": "2", "device_id": "42"})
        await catch_up(app)
        # User 42's work, and device 42's newest (it superseded the one before it).
        assert (await queues(admin))["q"]["ready"] == 2

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

    # A late event was counted with every kept event newer than it, however much newer:
    # 12:00, 12:10 and a late 11:00 asked for a pre-warm caused by 12:10 and 11:00.
    async def test_a_late_event_is_not_counted_with_events_far_newer_than_it(
        self, app: FastAPI, admin: Client
    ) -> None:
        await define(
            admin, id="warm", types=["camera.motion"],
            prewarm={"model": "faces", "count": 2, "within_s": 60},
        )  # fmt: skip
        for at in ("12:00:00", "12:10:00", "11:00:00"):
            await post(admin, type="camera.motion", source="/cam/1", time=f"2026-11-30T{at}Z")
        await catch_up(app)
        assert await events_of_type(admin, "causeway.model.prewarm_requested") == []

    async def test_a_late_event_counts_with_the_events_within_the_window_of_it(
        self, app: FastAPI, admin: Client
    ) -> None:
        await define(
            admin, id="warm", types=["camera.motion"],
            prewarm={"model": "faces", "count": 3, "within_s": 60},
        )  # fmt: skip
        # Late: 11:00:00 lies an hour from the rest, 12:09:55 within 55 s of the first two;
        # 12:10:20 comes after the request, whose events count no more.
        sent = [
            await post(admin, type="camera.motion", source="/cam/1", time=f"2026-11-30T{at}Z")
            for at in ("12:10:00", "12:10:50", "11:00:00", "12:09:55", "12:10:20")
        ]
        await catch_up(app)
        [request] = await events_of_type(admin, "causeway.model.prewarm_requested")
        assert request["causationid"].split(",") == [sent[n]["id"] for n in (0, 1, 3)]
        assert request["data"]["count"] == 3
        # Replayed, the dispatcher decides the same: no request again, and 12:10:20 is
        # still counted, with two more events within 60 s of it.
        runner = app.state.runner
        await runner.rebuild(runner.projection("scheduler-dispatch"))
        assert await events_of_type(admin, "causeway.model.prewarm_requested") == [request]
        more = [
            await post(admin, type="camera.motion", source="/cam/1", time=f"2026-11-30T{at}Z")
            for at in ("12:10:40", "12:10:45")
        ]
        await catch_up(app)
        [_, again] = await events_of_type(admin, "causeway.model.prewarm_requested")
        assert again["causationid"].split(",") == [e["id"] for e in (sent[4], *more)]
