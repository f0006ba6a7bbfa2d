"""Leasing and results (scope ``worker``): ``POST /queues/{queue}/lease`` gives the best
task this worker can run, or 204 after waiting up to ``wait_s``; ``POST
/tasks/{id}/heartbeat|complete|fail`` with the lease id extend, finish or fail it."""

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
)

from app.db.engine import Engine
from app.errors import AppError, BadRequest, InvalidCloudEvent
from app.store.append.group_commit import Appender
from app.store.keys import Principal
from app.store.records import EXACT_LIMIT, NewEvent, Text
from app.web.bodies import JSONRoute, receive_body
from scheduler.placement import OffPeak, WorkerProfile
from scheduler.queue import Lease, TaskQueue
from scheduler.rows.wakeups import TaskWakeups
from scheduler.tasks import TaskState
from scheduler.web import NAME_PATTERN, PrincipalOf, QueueName
from scheduler.web.documents import task_json

# Numbers a float holds exactly, and finite ones: a capability is compared as a float.
Capability = (
    StrictBool
    | Annotated[StrictInt, Field(ge=-EXACT_LIMIT, le=EXACT_LIMIT)]
    | Annotated[StrictFloat, Field(allow_inf_nan=False)]
)
_POLL_S = (0.05, 0.5)  # long-poll without wake-ups: first and longest pause between tries
_WOKEN_POLL_S = 1.0  # long-poll with wake-ups: the longest wait (a retry's backoff ending)
MAX_TASKS = 100


@dataclass(frozen=True, slots=True)
class LeasePolicy:
    lease_s: float
    max_lease_s: float
    max_wait_s: float
    off_peak: OffPeak | None


class LeaseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    worker: str = Field(pattern=NAME_PATTERN)
    capabilities: dict[Text, Capability] = Field(
        default_factory=dict,
        description="e.g. {'gpu_memory_gb': 24, 'fp16': true, 'int8': false}",
    )
    spot: bool = False
    labels: dict[Text, Text] = Field(default_factory=dict)
    wait_s: float = Field(default=0.0, ge=0, description="long-poll: wait this long for a task")
    lease_s: float | None = Field(default=None, gt=0)
    max_tasks: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TASKS,
        description="lease up to this many tasks at once (each under a lease of its own); "
        "given, the answer is {'tasks': [...]}, else one task's document",
    )


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


class TaskCompletion(Completion):
    task: Text


class Completions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tasks: list[TaskCompletion] = Field(min_length=1, max_length=MAX_TASKS)


class TaskFailure(Failure):
    task: Text


class Failures(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tasks: list[TaskFailure] = Field(min_length=1, max_length=MAX_TASKS)


def create_router(
    engine: Engine,
    decisions: Appender,
    max_request_bytes: int,
    parse_events: Callable[[bytes], list[NewEvent]],
    policy: LeasePolicy,
    worker: PrincipalOf,
    wakeups: TaskWakeups,
) -> APIRouter:
    router = APIRouter(tags=["scheduler"], route_class=JSONRoute)
    Worker = Annotated[Principal, Depends(worker)]

    @router.post(
        "/queues/{queue}/lease",
        summary="Lease the best task(s) this worker can run (204: none, after wait_s)",
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
            seen = wakeups.generation  # a wake-up from here on is one this try may miss
            async with engine.begin() as conn:
                found = await TaskQueue(conn, appender=decisions).lease(
                    principal.tenant,
                    queue,
                    profile,
                    lease_s=lease_s,
                    off_peak=policy.off_peak,
                    max_tasks=body.max_tasks or 1,
                )
            if found:
                document: Any = [_lease_json(one) for one in found]
                document = {"tasks": document} if body.max_tasks is not None else document[0]
                return Response(orjson.dumps(document), media_type="application/json")
            left = deadline - loop.time()
            if left <= 0:
                return Response(status_code=204)
            pause = await _pause(wakeups, seen, left, pause)

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
        return task_json(state)

    _batch_routes(router, engine, decisions, max_request_bytes, parse_events, Worker)

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
        body, results = _completion_of(raw, parse_events)
        async with engine.begin() as conn:
            state, positions = await TaskQueue(conn, appender=decisions).complete(
                principal.tenant, task_id, body.lease, results
            )
        return {"task": task_id, **_completed(state, results, positions)}

    @router.post("/tasks/{task_id}/fail", summary="Report a failed attempt and its class")
    async def fail(task_id: str, body: Failure, principal: Worker) -> dict[str, Any]:
        async with engine.begin() as conn:
            state = await TaskQueue(conn, appender=decisions).fail(
                principal.tenant, task_id, body.lease, body.error_class, body.message
            )
        return task_json(state)

    return router


def _batch_routes(
    router: APIRouter,
    engine: Engine,
    decisions: Appender,
    max_request_bytes: int,
    parse_events: Callable[[bytes], list[NewEvent]],
    Worker: Any,  # the dependency's annotated type, as create_router names it
) -> None:
    """``POST /tasks/complete`` and ``POST /tasks/fail``: many tasks in one request, each
    answered on its own (before ``/tasks/{id}/...``, as in ``docs/openapi.json``)."""

    @router.post(
        "/tasks/complete",
        summary="Finish many tasks, each answered on its own",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": Completions.model_json_schema()}},
            }
        },
    )
    async def complete_many(request: Request, principal: Worker) -> dict[str, Any]:
        raw = await receive_body(
            request.receive, request.headers.get("content-length"), max_request_bytes
        )
        try:
            body = Completions.model_validate_json(raw)
        except ValidationError as invalid:
            raise RequestValidationError(invalid.errors(include_url=False)) from None
        if len({item.task for item in body.tasks}) < len(body.tasks):
            raise BadRequest("tasks: a task is named twice")
        parsed: dict[int, list[NewEvent] | AppError] = {}
        for n, item in enumerate(body.tasks):
            try:
                parsed[n] = _results_of(item.events, parse_events)
            except AppError as refused:
                parsed[n] = refused
        valid = [n for n, p in parsed.items() if not isinstance(p, AppError)]
        async with engine.begin() as conn:
            done = await TaskQueue(conn, appender=decisions).complete_many(
                principal.tenant,
                [(body.tasks[n].task, body.tasks[n].lease, _events(parsed[n])) for n in valid],
            )
        outcomes: dict[int, Any] = {**parsed, **dict(zip(valid, done, strict=True))}
        answers = []
        for n, item in enumerate(body.tasks):
            outcome = outcomes[n]
            if isinstance(outcome, AppError):
                answers.append(_refused(item.task, outcome))
                continue
            state, positions = outcome
            results = _events(parsed[n])
            answers.append(
                {"task": item.task, "status": 200, **_completed(state, results, positions)}
            )
        return {"tasks": answers}

    @router.post("/tasks/fail", summary="Report many failed attempts, each answered on its own")
    async def fail_many(body: Failures, principal: Worker) -> dict[str, Any]:
        if len({item.task for item in body.tasks}) < len(body.tasks):
            raise BadRequest("tasks: a task is named twice")
        async with engine.begin() as conn:
            outcomes = await TaskQueue(conn, appender=decisions).fail_many(
                principal.tenant,
                [(i.task, i.lease, i.error_class, i.message) for i in body.tasks],
            )
        return {
            "tasks": [
                _refused(item.task, outcome)
                if isinstance(outcome, AppError)
                else {"task": item.task, "status": 200, "result": task_json(outcome)}
                for item, outcome in zip(body.tasks, outcomes, strict=True)
            ]
        }


async def _pause(wakeups: TaskWakeups, seen: int, left: float, pause: float) -> float:
    """Wait before a long-poll's next try, ``left`` at most (the last wait ends at the
    deadline, for one more try); the pause after this one."""
    if wakeups.listening:
        # Until the dispatcher (or a retry, a requeue) makes a task ready.
        await wakeups.wait(seen, min(_WOKEN_POLL_S, left))
        return pause
    await asyncio.sleep(min(pause, left))
    return min(pause * 2, _POLL_S[1])


def _completed(state: TaskState, results: list[NewEvent], positions: list[int]) -> dict[str, Any]:
    return {
        "state": "completed",
        "trigger": state.trigger_id,
        "results": [{"id": e.id, "position": p} for e, p in zip(results, positions, strict=True)],
    }


def _refused(task_id: str, refused: AppError) -> dict[str, Any]:
    """A task's answer in a batch when it was refused: its status and RFC 9457 problem."""
    problem = {
        "type": f"/problems/{refused.code}",
        "title": refused.title,
        "status": refused.status,
        "detail": refused.detail,
        **refused.extensions,
    }
    return {"task": task_id, "status": refused.status, "problem": problem}


def _events(parsed: list[NewEvent] | AppError) -> list[NewEvent]:
    return parsed if not isinstance(parsed, AppError) else []


def _lease_json(found: Lease) -> dict[str, Any]:
    return {
        "task": task_json(found.task),
        "lease": found.lease_id,
        "expires_at": found.expires_at.isoformat(),
        "trigger": orjson.Fragment(found.trigger),  # stored JSON, as it is
    }


def _completion_of(
    raw: bytes, parse_events: Callable[[bytes], list[NewEvent]]
) -> tuple[Completion, list[NewEvent]]:
    """The completion in ``raw``, and its result events as ingest parses them."""
    try:
        body = Completion.model_validate_json(raw)
    except ValidationError as invalid:
        raise RequestValidationError(invalid.errors(include_url=False)) from None
    return body, _results_of(body.events, parse_events)


def _results_of(
    events: list[dict[str, Any]], parse_events: Callable[[bytes], list[NewEvent]]
) -> list[NewEvent]:
    """A completion's result events, as ingest parses them."""
    if not events:
        return []
    # The standard library writes integers of any size; ingest's binding then treats
    # them as it treats those of POST /events.
    try:
        encoded = json.dumps(events, ensure_ascii=False, allow_nan=False).encode()
    except ValueError:  # 1e400 read as infinity: no JSON can carry it on
        raise InvalidCloudEvent(
            "events: a number is infinite or NaN when read as a double"
        ) from None
    return parse_events(encoded)
