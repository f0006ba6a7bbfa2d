"""Leasing and results (scope ``worker``): ``POST /queues/{queue}/lease`` gives the best
task this worker can run, or 204 after waiting up to ``wait_s``; ``POST
/tasks/{id}/heartbeat|complete|fail`` with the lease id extend, finish or fail it."""

import asyncio
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
from app.store.append.group_commit import Appender
from app.store.keys import Principal
from app.store.records import EXACT_LIMIT, NewEvent, Text
from app.web import json_text
from app.web.bodies import JSONRoute, receive_body
from scheduler.placement import OffPeak, WorkerProfile
from scheduler.queue import Lease, TaskQueue
from scheduler.web import NAME_PATTERN, PrincipalOf, QueueName
from scheduler.web.documents import task_json

# Numbers a float holds exactly, and finite ones: a capability is compared as a float.
Capability = (
    StrictBool
    | Annotated[StrictInt, Field(ge=-EXACT_LIMIT, le=EXACT_LIMIT)]
    | Annotated[StrictFloat, Field(allow_inf_nan=False)]
)
_POLL_S = (0.05, 0.5)  # long-poll: first and longest pause between lease attempts


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


def create_router(
    engine: Engine,
    decisions: Appender,
    max_request_bytes: int,
    parse_events: Callable[[bytes], list[NewEvent]],
    policy: LeasePolicy,
    worker: PrincipalOf,
) -> APIRouter:
    router = APIRouter(tags=["scheduler"], route_class=JSONRoute)
    Worker = Annotated[Principal, Depends(worker)]

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
                return Response(_lease_document(found), media_type="application/json")
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
        return task_json(state)

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
        body, results = _completion_of(raw, request.headers.get("content-type", ""), parse_events)
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
        return task_json(state)

    return router


def _lease_document(found: Lease) -> bytes:
    document = {
        "task": task_json(found.task),
        "lease": found.lease_id,
        "expires_at": found.expires_at.isoformat(),
        "trigger": orjson.Fragment(found.trigger),  # stored JSON, as it is
    }
    return orjson.dumps(document)


def _completion_of(
    raw: bytes, content_type: str, parse_events: Callable[[bytes], list[NewEvent]]
) -> tuple[Completion, list[NewEvent]]:
    """The completion in ``raw``, and its result events as ingest parses them."""
    json_text.refuse_other_charsets(content_type)
    try:
        body = Completion.model_validate(json_text.loads(raw))  # the one rule for JSON, first
    except ValidationError as invalid:
        raise RequestValidationError(invalid.errors(include_url=False)) from None
    # Read as POST /events reads its body (orjson: no infinity, an integer past 64 bits
    # a float), so written back as it was read.
    return body, parse_events(orjson.dumps(body.events)) if body.events else []
