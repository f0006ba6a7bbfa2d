"""Leasing and results (scope ``worker``): ``POST /queues/{queue}/lease`` gives the best
task this worker can run, or 204 after waiting up to ``wait_s``; ``POST
/tasks/{id}/heartbeat|complete|fail`` with the lease id extend, finish or fail it."""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
)

from app.db.engine import Engine
from app.errors import (
    AppError,
    BadRequest,
    Conflict,
    IdConflict,
    InvalidCloudEvent,
    InvalidEvent,
    LeaseLost,
    NotFound,
)
from app.store.append.group_commit import Appender
from app.store.keys import Principal, Scope
from app.store.records import EXACT_LIMIT, NewEvent, Text, integral
from app.web import json_text
from app.web.bodies import json_route, receive_body
from app.web.dependencies import authorization_of, authorize
from app.web.openapi import answers
from scheduler.lease_requests import Lease, Wanted
from scheduler.placement import OffPeak, WorkerProfile
from scheduler.queue import TaskQueue
from scheduler.rows.wakeups import TaskWakeups
from scheduler.tasks import ErrorClass, TaskState
from scheduler.traces import decision_span
from scheduler.web import NAME_PATTERN, POSITION_HEADER, PrincipalOf, QueueName
from scheduler.web.completions import (
    COMPLETION_BODY,
    COMPLETIONS_BODY,
    MAX_TASKS,
    BatchCompletion,
    Completions,
    TaskCompletion,
    completed_json,
    completion_of,
    refused_json,
)
from scheduler.web.documents import task_json

# Numbers a float holds exactly, and finite ones: a capability is compared as a float.
Capability = (
    StrictBool
    | Annotated[StrictInt, Field(ge=-EXACT_LIMIT, le=EXACT_LIMIT)]
    | Annotated[StrictFloat, Field(allow_inf_nan=False)]
)
_POLL_S = (0.05, 0.5)  # long-poll without wake-ups: first and longest pause between tries
_WOKEN_POLL_S = 1.0  # long-poll with wake-ups: the longest wait (a retry's backoff ending)


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
    spot: StrictBool = False
    labels: dict[Text, Text] = Field(default_factory=dict)
    wait_s: StrictFloat = Field(
        default=0.0, ge=0, allow_inf_nan=False, description="long-poll: wait this long for a task"
    )
    lease_s: StrictFloat | None = Field(default=None, gt=0, allow_inf_nan=False)
    # An integral float (15.0) is the integer it spells, as JSON Schema's "integer" says.
    max_tasks: (
        Annotated[int, Strict(), Field(ge=1, le=MAX_TASKS), BeforeValidator(integral)] | None
    ) = Field(
        default=None,
        description="lease up to this many tasks at once (each under a lease of its own); "
        "given, the answer is {'tasks': [...]}, else one task's document",
    )
    request_id: str | None = Field(
        default=None,
        pattern=r"^[!-~]{1,128}$",
        description="the worker's name for this request (1-128 visible ASCII characters), "
        "new for each: sent again with it (its answer lost), the request answers the tasks "
        "it leased that this worker still holds, under the same leases, and leases no "
        "others; its completions are answered as before",
    )
    complete: list[TaskCompletion] | None = Field(
        default=None,
        max_length=MAX_TASKS,
        description="first finish these tasks, as POST /tasks/complete does (each answered on "
        "its own, in the answer's 'completed'), in the same transaction as the first try to "
        "lease; given, the answer is always {'tasks': [...], 'completed': [...]}, 200",
    )


class Heartbeat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lease: Text
    lease_s: StrictFloat | None = Field(default=None, gt=0, allow_inf_nan=False)


class Failure(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lease: Text
    error_class: ErrorClass = Field(alias="class")
    message: Text = Field(max_length=4000)


# A task's results are events: refused as POST /events would refuse them.
_RESULTS = answers(InvalidCloudEvent, NotFound, LeaseLost, Conflict, IdConflict, InvalidEvent)
_HELD = answers(NotFound, LeaseLost)  # a command under a lease


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
    router = APIRouter(tags=["scheduler"], route_class=json_route(Scope.WORKER))
    Worker = Annotated[Principal, Depends(worker)]

    @router.post(
        "/queues/{queue}/lease",
        summary="Lease the best task(s) this worker can run (204: none, after wait_s)",
        responses={204: {"description": "no task this worker can run"}, **answers(Conflict)},
    )
    async def lease(
        queue: QueueName, body: LeaseRequest, principal: Worker, request: Request
    ) -> Response:
        wanted = _wanted(queue, body, policy)
        completing = await _completing(body, request, parse_events)
        completed: list[dict[str, Any]] | None = None  # their answers, once committed
        highest = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(body.wait_s, policy.max_wait_s)
        pause = _POLL_S[0]
        waited = False
        while True:
            # Leasing to a worker that is gone would only burn one of the task's attempts
            # (what it finished is still stored: that is work done).
            gone = await request.is_disconnected()
            if gone and completing is None:
                return _leased([], completed, highest, batch=body.max_tasks is not None)
            if waited:  # a key revoked while the long-poll waited leases nothing more
                await authorize(
                    request.app.state.authenticator,
                    authorization_of(request.scope["headers"]),
                    Scope.WORKER,
                )
            seen = wakeups.generation  # a wake-up from here on is one this try may miss
            found, done = await _lease_once(
                engine,
                decisions,
                principal.tenant,
                queue,
                None if gone else wanted,
                completing,
            )
            if completing is not None:
                completed, highest = completing.answers(done)
                completing = None
            if found or gone or (left := deadline - loop.time()) <= 0:
                return _leased(found, completed, highest, batch=body.max_tasks is not None)
            pause = await _pause(wakeups, seen, left, pause)
            waited = True

    @router.post("/tasks/{task_id}/heartbeat", summary="Extend a lease", responses=_HELD)
    async def heartbeat(
        task_id: str, body: Heartbeat, principal: Worker, response: Response
    ) -> dict[str, Any]:
        state = await _extend(engine, decisions, principal.tenant, task_id, body, policy)
        return _answered(state, response)

    _batch_routes(router, engine, decisions, max_request_bytes, parse_events, Worker)

    @router.post(
        "/tasks/{task_id}/complete",
        summary="Finish a task with its result events",
        responses=_RESULTS,
        openapi_extra=COMPLETION_BODY,
    )
    async def complete(
        task_id: str, request: Request, principal: Worker, response: Response
    ) -> dict[str, Any]:
        # Read under the same cap as POST /events: results can be large.
        raw = await receive_body(
            request.receive, request.headers.get("content-length"), max_request_bytes
        )
        body, results = completion_of(raw, request.headers.get("content-type", ""), parse_events)
        async with engine.begin() as conn:
            state, positions = await TaskQueue(conn, appender=decisions).complete(
                principal.tenant, task_id, body.lease, results
            )
        response.headers[POSITION_HEADER] = str(max([state.position, *positions]))
        return {"task": task_id, **completed_json(state, results, positions)}

    @router.post(
        "/tasks/{task_id}/fail", summary="Report a failed attempt and its class", responses=_HELD
    )
    async def fail(
        task_id: str, body: Failure, principal: Worker, response: Response
    ) -> dict[str, Any]:
        state = await _fail(engine, decisions, principal.tenant, task_id, body)
        return _answered(state, response)

    return router


async def _completing(
    body: LeaseRequest, request: Request, parse_events: Callable[[bytes], list[NewEvent]]
) -> BatchCompletion | None:
    """The tasks a lease request finishes first, if it names some. Their results are
    CloudEvents, read as POST /events reads them (the one rule for JSON: no Infinity, no
    integer past 64 bits), not as the lease's own fields were: the body once more, by
    that rule."""
    if body.complete is None:
        return None
    read = json_text.loads(await request.body())["complete"]
    items = [
        item.model_copy(update={"events": again.get("events", [])})
        for item, again in zip(body.complete, read, strict=True)
    ]
    return BatchCompletion.of(items, parse_events, field="complete")


def _wanted(queue: str, body: LeaseRequest, policy: LeasePolicy) -> Wanted:
    """What ``body`` asks to lease from ``queue``, held to ``policy``."""
    profile = WorkerProfile.parse(
        body.worker, body.capabilities, spot=body.spot, labels=body.labels
    )
    lease_s = min(body.lease_s or policy.lease_s, policy.max_lease_s)
    return Wanted(
        queue, profile, lease_s, policy.off_peak, body.max_tasks or 1, request=body.request_id
    )


async def _lease_once(
    engine: Engine,
    decisions: Appender,
    tenant: str,
    queue: str,
    wanted: Wanted | None,
    completing: BatchCompletion | None,
) -> tuple[list[Lease], list[tuple[TaskState, list[int]] | AppError]]:
    """One try of a lease request, in one transaction: its completions first (when it
    brings some), then the lease of up to ``wanted``'s number of tasks (none when
    ``wanted`` is None: the worker is gone). The leases, and the completions' outcomes."""
    done: list[tuple[TaskState, list[int]] | AppError] = []
    found: list[Lease] = []
    with decision_span("lease tasks", tenant, queue=queue) as span:
        async with engine.begin() as conn:
            commands = TaskQueue(conn, appender=decisions)
            if wanted is not None:
                items = completing.commands() if completing is not None else []
                found, done = await commands.complete_and_lease(tenant, items, wanted)
            elif completing is not None:
                done = await commands.complete_many(tenant, completing.commands())
        if span is not None:
            span.set_attribute("causeway.tasks.leased", len(found))
    return found, done


async def _extend(
    engine: Engine,
    decisions: Appender,
    tenant: str,
    task_id: str,
    body: Heartbeat,
    policy: LeasePolicy,
) -> TaskState:
    """``POST /tasks/{task_id}/heartbeat``'s decision."""
    async with engine.begin() as conn:
        return await TaskQueue(conn, appender=decisions).extend(
            tenant,
            task_id,
            body.lease,
            lease_s=body.lease_s,
            default_lease_s=policy.lease_s,
            max_lease_s=policy.max_lease_s,
        )


async def _fail(
    engine: Engine, decisions: Appender, tenant: str, task_id: str, body: Failure
) -> TaskState:
    """``POST /tasks/{task_id}/fail``'s decision, in its span while tracing is on."""
    with decision_span("fail task", tenant, **{"task.id": task_id}) as span:
        async with engine.begin() as conn:
            state = await TaskQueue(conn, appender=decisions).fail(
                tenant, task_id, body.lease, body.error_class, body.message
            )
        if span is not None:
            span.set_attribute("causeway.task.state", state.state)
    return state


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
        openapi_extra=COMPLETIONS_BODY,
    )
    async def complete_many(
        request: Request, principal: Worker, response: Response
    ) -> dict[str, Any]:
        raw = await receive_body(
            request.receive, request.headers.get("content-length"), max_request_bytes
        )
        json_text.refuse_other_charsets(request.headers.get("content-type", ""))
        try:
            body = Completions.model_validate(json_text.loads(raw))  # the one rule for JSON
        except ValidationError as invalid:
            raise RequestValidationError(invalid.errors(include_url=False)) from None
        batch = BatchCompletion.of(body.tasks, parse_events, field="tasks")
        async with engine.begin() as conn:
            done = await TaskQueue(conn, appender=decisions).complete_many(
                principal.tenant, batch.commands()
            )
        answers, highest = batch.answers(done)
        response.headers[POSITION_HEADER] = str(highest)
        return {"tasks": answers}

    @router.post("/tasks/fail", summary="Report many failed attempts, each answered on its own")
    async def fail_many(body: Failures, principal: Worker, response: Response) -> dict[str, Any]:
        if len({item.task for item in body.tasks}) < len(body.tasks):
            raise BadRequest("tasks: a task is named twice")
        async with engine.begin() as conn:
            outcomes = await TaskQueue(conn, appender=decisions).fail_many(
                principal.tenant,
                [(i.task, i.lease, i.error_class, i.message) for i in body.tasks],
            )
        decided = [o.position for o in outcomes if not isinstance(o, AppError)]
        response.headers[POSITION_HEADER] = str(max(decided, default=0))
        return {
            "tasks": [
                refused_json(item.task, outcome)
                if isinstance(outcome, AppError)
                else {"task": item.task, "status": 200, "result": task_json(outcome)}
                for item, outcome in zip(body.tasks, outcomes, strict=True)
            ]
        }


def _leased(
    found: list[Lease], completed: list[dict[str, Any]] | None, highest: int, *, batch: bool
) -> Response:
    """The leases' answer: with completions, ``{"tasks": [...], "completed": [...]}``;
    else ``{"tasks": [...]}`` to a batch, the one lease otherwise, or 204 when there is
    none; the position of the last decision in the header."""
    if not found and completed is None:
        return Response(status_code=204)
    leases = [_lease_json(one) for one in found]
    document: Any = leases[0] if not batch and completed is None else {"tasks": leases}
    if completed is not None:
        document["completed"] = completed
    highest = max([highest, *(one.task.position for one in found)])
    headers = {POSITION_HEADER: str(highest)}
    return Response(orjson.dumps(document), media_type="application/json", headers=headers)


def _answered(state: TaskState, response: Response) -> dict[str, Any]:
    """A command's answer: the task, and the position of the decision in the header."""
    response.headers[POSITION_HEADER] = str(state.position)
    return task_json(state)


async def _pause(wakeups: TaskWakeups, seen: int, left: float, pause: float) -> float:
    """Wait before a long-poll's next try, ``left`` at most (the last wait ends at the
    deadline, for one more try); the pause after this one."""
    if wakeups.listening:
        # Until the dispatcher (or a retry, a requeue) makes a task ready.
        await wakeups.wait(seen, min(_WOKEN_POLL_S, left))
        return pause
    await asyncio.sleep(min(pause, left))
    return min(pause * 2, _POLL_S[1])


def _lease_json(found: Lease) -> dict[str, Any]:
    return {
        "task": task_json(found.task),
        "lease": found.lease_id,
        "expires_at": found.expires_at.isoformat(),
        "trigger": orjson.Fragment(found.trigger),  # stored JSON, as it is
    }
