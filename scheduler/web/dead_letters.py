"""The dead-letter queue: ``GET /dead-letters`` (filters: queue, class, since; a page at a
time, ``next`` naming where the next one starts) and ``GET /dead-letters/{id}`` (scope
``read``); ``POST /dead-letters/{id}/requeue``, ``POST /dead-letters/{id}/discard`` and
``POST /dead-letters/requeue`` (the oldest that match, in bulk: ``scheduler.requeue``)
(scope ``admin``)."""

import base64
import re
from datetime import datetime
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from app.db.engine import Connection, Engine
from app.db.tenancy import tenant_transaction
from app.errors import BadRequest, Conflict, NotFound
from app.store.append.group_commit import Appender
from app.store.decision_reads import read_stream
from app.store.keys import Principal, Scope
from app.store.reads import EventReader
from app.store.records import Text
from app.store.timestamps import parse_time_parameter
from app.web.bodies import json_route
from app.web.dependencies import PLAIN_DIGITS
from app.web.openapi import TIME_FORMAT, answers
from scheduler import tasks as t
from scheduler.queue import TaskQueue
from scheduler.requeue import MAX_REQUEUE, requeue_dead_letters
from scheduler.rows import tasks as task_rows
from scheduler.rows.dead_letters import DeadLetters, read_dead_letters
from scheduler.web import NAME_PATTERN, POSITION_HEADER, PrincipalOf, Settle, tasks_settled
from scheduler.web.documents import history_json, task_json
from scheduler.web.queues import TaskId, TaskIdConvertor

_SINCE = Query(description="RFC 3339", json_schema_extra=TIME_FORMAT)
_REQUEUE = (
    "Its attempts reset; answered with the task as it then is. A dead letter of a debounced "
    "route for which a newer task of its key came since is superseded by that task instead "
    "(its input is stale): answered `superseded`."
)


class Requeue(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: Text | None = Field(default=None, max_length=500)


class RequeueMany(BaseModel):
    """Which dead letters to requeue (each filter left out: any), how many at most, and
    why."""

    model_config = ConfigDict(extra="forbid")
    queue: str | None = Field(default=None, pattern=NAME_PATTERN)
    error_class: t.ErrorClass | None = Field(default=None, alias="class")
    since: str | None = Field(
        default=None,
        description="RFC 3339: dead since then",
        json_schema_extra={"format": "date-time"},
    )
    limit: int = Field(default=MAX_REQUEUE, ge=1, le=MAX_REQUEUE)
    reason: Text | None = Field(default=None, max_length=500)


class Discard(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: Text = Field(min_length=1, max_length=500)


_CURSOR = "^[A-Za-z0-9_-]+={0,2}$"  # base64url, as ``_cursor`` writes it
_TASK_ID = re.compile(rf"{TaskIdConvertor.regex}\Z")


def _cursor(last: t.TaskState) -> str:
    """Where a page ended, for ``after``: opaque to callers (when the task died, its id;
    a dead letter's row always says when)."""
    return base64.urlsafe_b64encode(orjson.dumps([last.finished_at, last.id])).decode()


def _position_of(cursor: str) -> tuple[datetime, str]:
    """``_cursor``'s pair back, or a ``BadRequest`` naming ``after``."""
    try:
        pair = orjson.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError("not a pair")
        at, task_id = pair
        when = datetime.fromisoformat(at)
        # As _cursor writes them: a time with its offset (PostgreSQL would read one
        # without in the session's zone), a task's id.
        if when.tzinfo is None or not isinstance(task_id, str) or not _TASK_ID.match(task_id):
            raise ValueError("not a time and a task id")
        return when, task_id
    except (ValueError, TypeError, UnicodeEncodeError):
        raise BadRequest(
            "after: not a cursor this endpoint gave (pass the `next` of a page)", parameter="after"
        ) from None


async def _page(
    conn: Connection,
    tenant: str,
    which: DeadLetters,
    after: tuple[datetime, str] | None,
    limit: int,
) -> dict[str, Any]:
    """``limit`` dead letters past ``after`` (a cursor's place), and the cursor past them."""
    found = await read_dead_letters(
        conn,
        tenant,
        which,
        after=after,
        limit=limit + 1,  # one more says whether there is a next page
    )
    page = found[:limit]
    return {
        "dead_letters": [task_json(s) for s in page],
        "next": _cursor(page[-1]) if len(found) > limit else None,
    }


async def _dead_letter(conn: Connection, tenant: str, task_id: str) -> dict[str, Any]:
    """A dead letter's document: the task, its failures, its history and its trigger."""
    state = await task_rows.fetch_task(conn, tenant, task_id)
    if state is None or state.state != "dead":
        raise NotFound(f"no dead letter {task_id!r}", task=task_id)
    history = history_json(await read_stream(conn, tenant, state.stream))
    trigger = await EventReader(conn).read_event(tenant, state.trigger_id)
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
    return {
        **task_json(state),
        "failures": failures,
        "history": history,
        "trigger_event": orjson.Fragment(trigger or "null"),
    }


def create_router(
    engine: Engine, decisions: Appender, admin: PrincipalOf, read: PrincipalOf
) -> APIRouter:
    router = APIRouter(tags=["scheduler"], route_class=json_route(Scope.ADMIN))
    Admin = Annotated[Principal, Depends(admin)]
    Reader = Annotated[Principal, Depends(read)]
    Settled = Annotated[Settle, Depends(tasks_settled(read))]

    @router.get("/dead-letters", summary="Dead-lettered tasks (filters: queue, class, since)")
    async def list_dead_letters(
        principal: Reader,
        settled: Settled,
        queue: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
        error_class: Annotated[t.ErrorClass | None, Query(alias="class")] = None,
        since: Annotated[str | None, _SINCE] = None,
        limit: Annotated[int, Query(ge=1, le=1000), PLAIN_DIGITS] = 100,
        after: Annotated[
            str | None,
            Query(
                description="the `next` of the page before: the dead letters after it",
                pattern=_CURSOR,
            ),
        ] = None,
    ) -> dict[str, Any]:
        which = DeadLetters(queue, error_class, parse_time_parameter("since", since))
        place = None if after is None else _position_of(after)
        await settled()
        async with tenant_transaction(engine, principal.tenant) as conn:
            return await _page(conn, principal.tenant, which, place, limit)

    @router.get(
        "/dead-letters/{task_id:task_id}",
        summary="A dead letter: task, trigger, attempts",
        responses=answers(NotFound),
    )
    async def read_dead_letter(task_id: TaskId, principal: Reader, settled: Settled) -> Response:
        await settled()
        async with tenant_transaction(engine, principal.tenant) as conn:
            document = await _dead_letter(conn, principal.tenant, task_id)
        return Response(orjson.dumps(document), media_type="application/json")

    @router.post(
        "/dead-letters/requeue",
        summary="Put the oldest dead letters that match back in their queues (at most 100)",
    )
    async def requeue_many(
        principal: Admin, response: Response, body: RequeueMany | None = None
    ) -> dict[str, Any]:
        body = body or RequeueMany()  # no body: every filter left out
        since = parse_time_parameter("since", body.since)
        which = DeadLetters(body.queue, body.error_class, since)
        async with engine.begin() as conn:
            requeued, more = await requeue_dead_letters(
                conn,
                decisions,
                principal.tenant,
                which,
                limit=body.limit,
                reason=body.reason,
                actor=principal.key_id,
            )
        response.headers[POSITION_HEADER] = str(max((s.position for s in requeued), default=0))
        return {"requeued": [task_json(s) for s in requeued], "more": more}

    @router.post(
        "/dead-letters/{task_id}/requeue",
        summary="Put a dead letter back in its queue",
        description=_REQUEUE,
        responses=answers(NotFound, Conflict),
    )
    async def requeue(
        task_id: str, principal: Admin, response: Response, body: Requeue | None = None
    ) -> dict[str, Any]:
        async with engine.begin() as conn:
            state = await TaskQueue(conn, appender=decisions).requeue(
                principal.tenant,
                task_id,
                reason=body.reason if body else None,
                actor=principal.key_id,
            )
        response.headers[POSITION_HEADER] = str(state.position)
        return task_json(state)

    @router.post(
        "/dead-letters/{task_id}/discard",
        summary="Drop a dead letter, with a reason",
        responses=answers(NotFound, Conflict),
    )
    async def discard(
        task_id: str, body: Discard, principal: Admin, response: Response
    ) -> dict[str, Any]:
        async with engine.begin() as conn:
            state = await TaskQueue(conn, appender=decisions).discard(
                principal.tenant, task_id, reason=body.reason, actor=principal.key_id
            )
        response.headers[POSITION_HEADER] = str(state.position)
        return task_json(state)

    return router
