"""What a worker finishes a task with: a completion's body (its result events are
CloudEvents, read as ``POST /events`` reads them), a batch of them (``POST
/tasks/complete``, or with a lease request), and each task's answer."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.errors import AppError, BadRequest
from app.store.records import NewEvent, Text
from app.web import json_text
from app.web.openapi import CLOUDEVENT_REF
from scheduler.tasks import TaskState

MAX_TASKS = 100  # tasks in one lease, completion or failure request


class Completion(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lease: Text
    # Any JSON, not objects only: a result that is no CloudEvent is refused for its own task
    # (its answer in a batch), as the store refuses one it cannot keep, not the whole batch.
    events: list[Any] = Field(
        default_factory=list,
        description="result CloudEvents (JSON format)",
        json_schema_extra={"items": {"type": "object"}},
    )


class TaskCompletion(Completion):
    task: Text


# POST /tasks/{id}/complete's body, read by hand (``completion_of``): its events are
# CloudEvents, as POST /events reads them.
_COMPLETION_SCHEMA = Completion.model_json_schema()
_COMPLETION_SCHEMA["properties"]["events"]["items"] = CLOUDEVENT_REF
COMPLETION_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": _COMPLETION_SCHEMA}},
    }
}


class Completions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tasks: list[TaskCompletion] = Field(min_length=1, max_length=MAX_TASKS)


# POST /tasks/complete's body, inline (no $defs): each task's results are CloudEvents.
_TASK_COMPLETION_SCHEMA = TaskCompletion.model_json_schema()
_TASK_COMPLETION_SCHEMA["properties"]["events"]["items"] = CLOUDEVENT_REF
COMPLETIONS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "title": "Completions",
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["tasks"],
                    "properties": {
                        "tasks": {
                            "type": "array",
                            "items": _TASK_COMPLETION_SCHEMA,
                            "minItems": 1,
                            "maxItems": MAX_TASKS,
                        }
                    },
                }
            }
        },
    }
}


@dataclass(frozen=True, slots=True)
class BatchCompletion:
    """A batch completion's tasks, each one's result events read as ingest reads them: a
    task whose results are refused is answered with its problem, and the others go on."""

    items: list[TaskCompletion]
    parsed: dict[int, list[NewEvent] | AppError]

    @classmethod
    def of(
        cls,
        items: list[TaskCompletion],
        parse_events: Callable[[bytes], list[NewEvent]],
        *,
        field: str,
    ) -> "BatchCompletion":
        if len({item.task for item in items}) < len(items):
            raise BadRequest(f"{field}: a task is named twice")
        parsed: dict[int, list[NewEvent] | AppError] = {}
        for n, item in enumerate(items):
            try:
                parsed[n] = results_of(item.events, parse_events)
            except AppError as refused:
                parsed[n] = refused
        return cls(items, parsed)

    def _valid(self) -> list[int]:
        return [n for n, p in self.parsed.items() if not isinstance(p, AppError)]

    def commands(self) -> list[tuple[str, str, Sequence[NewEvent]]]:
        """``TaskQueue.complete_many``'s items: the tasks whose results were read."""
        return [
            (self.items[n].task, self.items[n].lease, _events(self.parsed[n]))
            for n in self._valid()
        ]

    def answers(
        self, done: list[tuple[TaskState, list[int]] | AppError]
    ) -> tuple[list[dict[str, Any]], int]:
        """Each task's answer, in order, from what ``commands`` came to (``done``); and
        the position of the last decision among them."""
        outcomes: dict[int, Any] = {**self.parsed, **dict(zip(self._valid(), done, strict=True))}
        answers, highest = [], 0
        for n, item in enumerate(self.items):
            outcome = outcomes[n]
            if isinstance(outcome, AppError):
                answers.append(refused_json(item.task, outcome))
                continue
            state, positions = outcome
            highest = max(highest, state.position, *positions)
            results = _events(self.parsed[n])
            answers.append(
                {"task": item.task, "status": 200, **completed_json(state, results, positions)}
            )
        return answers, highest


def completed_json(
    state: TaskState, results: list[NewEvent], positions: list[int]
) -> dict[str, Any]:
    return {
        "state": "completed",
        "trigger": state.trigger_id,
        "results": [{"id": e.id, "position": p} for e, p in zip(results, positions, strict=True)],
    }


def refused_json(task_id: str, refused: AppError) -> dict[str, Any]:
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


def completion_of(
    raw: bytes, content_type: str, parse_events: Callable[[bytes], list[NewEvent]]
) -> tuple[Completion, list[NewEvent]]:
    """The completion in ``raw``, and its result events as ingest parses them."""
    json_text.refuse_other_charsets(content_type)
    try:
        body = Completion.model_validate(json_text.loads(raw))  # the one rule for JSON, first
    except ValidationError as invalid:
        raise RequestValidationError(invalid.errors(include_url=False)) from None
    return body, results_of(body.events, parse_events)


def results_of(
    events: list[Any], parse_events: Callable[[bytes], list[NewEvent]]
) -> list[NewEvent]:
    """A completion's result events, as ingest parses them: read as POST /events reads its
    body (orjson: no infinity, an integer past 64 bits a float), so written back as it was
    read."""
    return parse_events(orjson.dumps(events)) if events else []
