"""The scheduler over HTTP: routes (scope ``admin``), leasing and results (scope
``worker``), queue signals and the dead-letter queue.

- ``POST/GET/DELETE /routes``: which events become which tasks (``scheduler.routes``).
- ``POST /queues/{queue}/lease``: the best task this worker can run, or 204 after waiting
  up to ``wait_s``; ``POST /tasks/{id}/heartbeat|complete|fail`` with the lease id.
- ``GET /queues``, ``GET /queues/{queue}/autoscale``, ``GET /metrics`` (Prometheus).
- ``GET /dead-letters``, ``GET /dead-letters/{id}``, ``POST /dead-letters/{id}/requeue``,
  ``POST /dead-letters/{id}/discard``.
"""

# No `from __future__ import annotations`: FastAPI must see the Depends() built in
# create_router, which a string annotation could not resolve.

import asyncio
import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from app.errors import BadRequest, InvalidCloudEvent, NotFound
from app.store.append.group_commit import Appender
from app.store.keys import Principal
from app.store.reads import EventReader
from app.store.records import EXACT_LIMIT, NewEvent, Text
from app.store.timestamps import parse_time_parameter
from app.web.bodies import JSONRoute, receive_body
from scheduler import routes as r
from scheduler import tasks as t
from scheduler.autoscale import AutoscaleAdvisor, PidController
from scheduler.placement import OffPeak, WorkerProfile
from scheduler.queue import QueueDepth, TaskQueue
from scheduler.route_reads import RouteReader

PrincipalOf = Callable[..., Coroutine[Any, Any, Principal]]


# Numbers a float holds exactly, and finite ones: a capability is compared as a float.
Capability = (
    StrictBool
    | Annotated[StrictInt, Field(ge=-EXACT_LIMIT, le=EXACT_LIMIT)]
    | Annotated[StrictFloat, Field(allow_inf_nan=False)]
)
_NAME = r"^[A-Za-z0-9_.\-]{1,128}$"
# A queue is named by a route, whose names are these: any other name is a typo, not a queue
# that happens to be empty (a lease would wait and answer 204 for ever).
QueueName = Annotated[str, Path(pattern=_NAME)]
_POLL_S = (0.05, 0.5)  # long-poll: first and longest pause between lease attempts


@dataclass(frozen=True, slots=True)
class Principals:
    admin: PrincipalOf
    worker: PrincipalOf
    read: PrincipalOf


@dataclass(frozen=True, slots=True)
class LeasePolicy:
    lease_s: float
    max_lease_s: float
    max_wait_s: float
    off_peak: OffPeak | None


class LeaseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    worker: str = Field(pattern=_NAME)
    capabilities: dict[Text, Capability] = Field(
        default_factory=dict,
        description="e.g. {'gpu_memory_gb': 24, 'fp16': true, 'int8': false}",
    )
    spot: bool = False
    labels: dict[Text, Text] = Field(default_factory=dict)
    wait_s: float = Field(default=0.0, ge=0, description="long-poll: wait this long for a task")
    lease_s: float | None = Field(default=None, gt=0)


class Heartbeat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lease: Text
    lease_s: float | None = Field(default=None, gt=0)


class Completion(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lease: Text
    events: list[dict[str, Any]] = Field(
        default_factory=list, description="result CloudEvents (JSON format)"
    )


class Failure(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lease: Text
    error_class: Literal["data_invalid", "model_version_mismatch", "transient", "unknown"] = Field(
        alias="class"
    )
    message: Text = Field(max_length=4000)


class Requeue(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: Text | None = Field(default=None, max_length=500)


class Discard(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: Text = Field(min_length=1, max_length=500)


class DeleteRoute(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: Text | None = Field(default=None, max_length=500)


def create_router(
    engine: AsyncEngine,
    appender: Appender,
    decisions: Appender,
    max_request_bytes: int,
    parse_events: Callable[[bytes], list[NewEvent]],
    policy: LeasePolicy,
    controller: PidController,
    principals: Principals,
) -> APIRouter:
    router = APIRouter(tags=["scheduler"], route_class=JSONRoute)
    Admin = Annotated[Principal, Depends(principals.admin)]
    Worker = Annotated[Principal, Depends(principals.worker)]
    Reader = Annotated[Principal, Depends(principals.read)]

    @router.post("/routes", status_code=201, summary="Define (or redefine) a route")
    async def define_route(body: dict[str, Any], principal: Admin) -> dict[str, Any]:
        route = r.parse_new_route(body)
        [appended] = await appender.append(principal.tenant, [r.define_event(route)])
        return {
            "route": route.as_json(),
            "position": appended.position,
            "detail": f"events after position {appended.position} are routed by it",
        }

    @router.get("/routes", summary="Every route of the tenant, as the dispatcher applies them")
    async def list_routes(principal: Admin) -> dict[str, Any]:
        async with engine.connect() as conn:
            return {"routes": await RouteReader(conn).read_routes(principal.tenant)}

    @router.get("/routes/{route_id}", summary="One route")
    async def read_route(route_id: str, principal: Admin) -> dict[str, Any]:
        return await _route(route_id, principal.tenant)

    @router.delete("/routes/{route_id}", summary="Stop routing by this route")
    async def delete_route(
        route_id: str, principal: Admin, body: DeleteRoute | None = None
    ) -> dict[str, Any]:
        await _route(route_id, principal.tenant)
        reason = body.reason if body else None
        event = r.delete_event(route_id, reason=reason, actor=principal.key_id)
        [appended] = await appender.append(principal.tenant, [event])
        return {"id": route_id, "deleted": True, "position": appended.position}

    async def _route(route_id: str, tenant: str) -> dict[str, Any]:
        async with engine.connect() as conn:
            found = await RouteReader(conn).read_route(tenant, route_id)
        if found is None:
            raise NotFound(f"no route {route_id!r}", route=route_id)
        return found

    @router.post(
        "/queues/{queue}/lease",
        summary="Lease the best task this worker can run (204: none, after wait_s)",
        responses={204: {"description": "no task this worker can run"}},
    )
    async def lease(
        queue: QueueName, body: LeaseRequest, principal: Worker, request: Request
    ) -> Response:
        profile = WorkerProfile.parse(
            body.worker, body.capabilities, spot=body.spot, labels=body.labels
        )
        lease_s = min(body.lease_s or policy.lease_s, policy.max_lease_s)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(body.wait_s, policy.max_wait_s)
        pause = _POLL_S[0]
        while True:
            if await request.is_disconnected():
                # Leasing to a worker that is gone would only burn one of the task's attempts.
                return Response(status_code=204)
            async with engine.begin() as conn:
                found = await TaskQueue(conn, appender=decisions).lease(
                    principal.tenant, queue, profile, lease_s=lease_s, off_peak=policy.off_peak
                )
            if found is not None:
                document = {
                    "task": _task_json(found.task),
                    "lease": found.lease_id,
                    "expires_at": found.expires_at.isoformat(),
                    "trigger": orjson.Fragment(found.trigger),  # stored JSON, as it is
                }
                return Response(orjson.dumps(document), media_type="application/json")
            left = deadline - loop.time()
            if left <= 0:
                return Response(status_code=204)
            # The last pause ends at the deadline, for one more try: a task that turns
            # ready in the last half second of wait_s is still offered.
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, _POLL_S[1])

    @router.post("/tasks/{task_id}/heartbeat", summary="Extend a lease")
    async def heartbeat(task_id: str, body: Heartbeat, principal: Worker) -> dict[str, Any]:
        async with engine.begin() as conn:
            state = await TaskQueue(conn, appender=decisions).extend(
                principal.tenant,
                task_id,
                body.lease,
                lease_s=body.lease_s,
                default_lease_s=policy.lease_s,
                max_lease_s=policy.max_lease_s,
            )
        return _task_json(state)

    @router.post(
        "/tasks/{task_id}/complete",
        summary="Finish a task with its result events",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": Completion.model_json_schema()}},
            }
        },
    )
    async def complete(task_id: str, request: Request, principal: Worker) -> dict[str, Any]:
        # Read under the same cap as POST /events: results can be large.
        raw = await receive_body(
            request.receive, request.headers.get("content-length"), max_request_bytes
        )
        try:
            body = Completion.model_validate_json(raw)
        except ValidationError as invalid:
            raise RequestValidationError(invalid.errors(include_url=False)) from None
        # The standard library writes integers of any size; ingest's binding then treats
        # them as it treats those of POST /events.
        try:
            encoded = json.dumps(body.events, ensure_ascii=False, allow_nan=False).encode()
        except ValueError:  # 1e400 read as infinity: no JSON can carry it on
            raise InvalidCloudEvent(
                "events: a number is infinite or NaN when read as a double"
            ) from None
        results = parse_events(encoded) if body.events else []
        async with engine.begin() as conn:
            state, positions = await TaskQueue(conn, appender=decisions).complete(
                principal.tenant, task_id, body.lease, results
            )
        return {
            "task": task_id,
            "state": "completed",
            "trigger": state.trigger_id,
            "results": [
                {"id": e.id, "position": p} for e, p in zip(results, positions, strict=True)
            ],
        }

    @router.post("/tasks/{task_id}/fail", summary="Report a failed attempt and its class")
    async def fail(task_id: str, body: Failure, principal: Worker) -> dict[str, Any]:
        async with engine.begin() as conn:
            state = await TaskQueue(conn, appender=decisions).fail(
                principal.tenant, task_id, body.lease, body.error_class, body.message
            )
        return _task_json(state)

    @router.get("/tasks/{task_id}", summary="A task's state and every decision about it")
    async def read_task(task_id: str, principal: Reader) -> dict[str, Any]:
        async with engine.connect() as conn:
            queue = TaskQueue(conn)
            state = await queue.fetch(principal.tenant, task_id)
            if state is None:
                raise NotFound(f"no task {task_id!r}", task=task_id)
            history = await queue.read_history(principal.tenant, state)
        return {**_task_json(state), "history": history}

    @router.get("/queues", summary="Depth by priority, oldest age, in flight, dead letters")
    async def list_queues(principal: Reader) -> dict[str, Any]:
        async with engine.connect() as conn:
            depths = await TaskQueue(conn).read_depths(principal.tenant, now=datetime.now(UTC))
        return {"queues": [_depth_json(d) for d in depths]}

    @router.get("/queues/{queue}/autoscale", summary="Recommended worker count (PID advice)")
    async def autoscale(queue: QueueName, principal: Reader) -> dict[str, Any]:
        async with engine.connect() as conn:
            advice = await AutoscaleAdvisor(conn, controller).read(principal.tenant, queue)
        return {
            "queue": queue,
            "recommended_workers": advice.recommended,
            "observed_latency_s": advice.observed_s,
            "target_latency_s": advice.target_s,
            "updated_at": advice.updated_at.isoformat() if advice.updated_at else None,
        }

    @router.get(
        "/metrics",
        summary="Prometheus gauges per queue (the tenant's)",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
    )
    async def metrics(principal: Reader) -> Response:
        async with engine.connect() as conn:
            depths = await TaskQueue(conn).read_depths(principal.tenant, now=datetime.now(UTC))
        return Response(_exposition(depths), media_type=CONTENT_TYPE_LATEST)

    @router.get("/dead-letters", summary="Dead-lettered tasks (filters: queue, class, since)")
    async def list_dead_letters(
        principal: Reader,
        queue: Annotated[str | None, Query(pattern=_NAME)] = None,
        error_class: Annotated[str | None, Query(alias="class")] = None,
        since: Annotated[str | None, Query(description="RFC 3339")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        if error_class is not None and error_class not in t.ERROR_CLASSES:
            raise BadRequest(f"class must be one of {', '.join(t.ERROR_CLASSES)}")
        when = parse_time_parameter("since", since)
        async with engine.connect() as conn:
            found = await TaskQueue(conn).read_dead_letters(
                principal.tenant, queue=queue, error_class=error_class, since=when, limit=limit
            )
        return {"dead_letters": [_task_json(s) for s in found]}

    @router.get("/dead-letters/{task_id}", summary="A dead letter: task, trigger, attempts")
    async def read_dead_letter(task_id: str, principal: Reader) -> Response:
        async with engine.connect() as conn:
            queue = TaskQueue(conn)
            state = await queue.fetch(principal.tenant, task_id)
            if state is None or state.state != "dead":
                raise NotFound(f"no dead letter {task_id!r}", task=task_id)
            history = await queue.read_history(principal.tenant, state)
            trigger = await EventReader(conn).read_event(principal.tenant, state.trigger_id)
        # Named apart from "attempts", which is the count here as in every task answer.
        failures = [
            {
                "attempt": h["data"].get("attempt"),
                "outcome": h["type"].removeprefix(t.PREFIX),
                "class": h["data"].get("class"),
                "message": h["data"].get("message"),
                "at": h["data"].get("at"),
            }
            for h in history
            if h["type"] in (t.RETRIED, t.DEAD_LETTERED)
        ]
        document = {
            **_task_json(state),
            "failures": failures,
            "history": history,
            "trigger_event": orjson.Fragment(trigger or "null"),
        }
        return Response(orjson.dumps(document), media_type="application/json")

    @router.post("/dead-letters/{task_id}/requeue", summary="Put a dead letter back in its queue")
    async def requeue(
        task_id: str, principal: Admin, body: Requeue | None = None
    ) -> dict[str, Any]:
        async with engine.begin() as conn:
            state = await TaskQueue(conn, appender=decisions).requeue(
                principal.tenant,
                task_id,
                reason=body.reason if body else None,
                actor=principal.key_id,
            )
        return _task_json(state)

    @router.post("/dead-letters/{task_id}/discard", summary="Drop a dead letter, with a reason")
    async def discard(task_id: str, body: Discard, principal: Admin) -> dict[str, Any]:
        async with engine.begin() as conn:
            state = await TaskQueue(conn, appender=decisions).discard(
                principal.tenant, task_id, reason=body.reason, actor=principal.key_id
            )
        return _task_json(state)

    return router


def _task_json(state: t.TaskState) -> dict[str, Any]:
    def at(value: datetime | None) -> str | None:
        return value.isoformat() if value is not None else None

    return {
        "id": state.id,
        "kind": state.kind,
        "queue": state.queue,
        "route": state.route_id,
        "priority": state.priority,
        "guaranteed": state.priority > 7,
        "requires": r.Requirements(
            state.req_numbers, tuple(state.req_flags), state.req_labels
        ).as_spec(),
        "state": state.state,
        "trigger": state.trigger_id,
        "trigger_type": state.trigger_type,
        "debounce_key": state.debounce_key,
        "attempts": state.attempts,
        "max_retries": state.max_retries,
        "available_at": at(state.available_at),
        "worker": state.worker,
        "lease_expires_at": at(state.lease_expires_at) if state.state == "leased" else None,
        "error": (
            {"class": state.error_class, "message": state.error} if state.error_class else None
        ),
        "disposition": state.disposition,
        "service": state.service,
        "created_at": at(state.created_at),
        "finished_at": at(state.finished_at),
        "version": state.version,
        "position": state.position,
    }


def _depth_json(depth: QueueDepth) -> dict[str, Any]:
    return {
        "queue": depth.queue,
        "ready": depth.ready,
        "ready_by_priority": {str(p): n for p, n in sorted(depth.ready_by_priority.items())},
        "delayed": depth.delayed,
        "in_flight": depth.in_flight,
        "dead_letters": depth.dead_letters,
        "alerts": depth.alerts,
        "oldest_ready_age_s": depth.oldest_ready_s,
    }


def _exposition(depths: list[QueueDepth]) -> bytes:
    """The gauges in Prometheus' text format, from a registry made for this scrape (the
    figures live in the database, shared by every process, not in this one)."""
    registry = CollectorRegistry(auto_describe=True)
    ready = Gauge(
        "causeway_queue_ready_tasks",
        "Tasks ready to lease now",
        ["queue", "priority"],
        registry=registry,
    )
    delayed = Gauge(
        "causeway_queue_delayed_tasks",
        "Tasks waiting out a retry backoff",
        ["queue"],
        registry=registry,
    )
    in_flight = Gauge(
        "causeway_queue_in_flight_tasks", "Leased tasks", ["queue"], registry=registry
    )
    oldest = Gauge(
        "causeway_queue_oldest_ready_age_seconds",
        "Age of the oldest ready task",
        ["queue"],
        registry=registry,
    )
    dead = Gauge("causeway_queue_dead_letters", "Dead-lettered tasks", ["queue"], registry=registry)
    alerts = Gauge(
        "causeway_queue_alerts",
        "Dead letters flagged for attention (transient or unknown failures)",
        ["queue"],
        registry=registry,
    )
    for depth in depths:
        for priority in range(10):
            ready.labels(depth.queue, str(priority)).set(depth.ready_by_priority.get(priority, 0))
        delayed.labels(depth.queue).set(depth.delayed)
        in_flight.labels(depth.queue).set(depth.in_flight)
        oldest.labels(depth.queue).set(depth.oldest_ready_s)
        dead.labels(depth.queue).set(depth.dead_letters)
        alerts.labels(depth.queue).set(depth.alerts)
    return generate_latest(registry)
