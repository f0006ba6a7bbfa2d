"""A small HTTP client for producers and workers: post CloudEvents to a Causeway service,
and lease, extend, complete or fail the scheduler's tasks.

It imports nothing of ``app``: it runs where producers run (the edge bridge, workers)
and speaks only HTTP. Events are plain dicts in the CloudEvents JSON format.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import httpx2
import orjson

__all__ = ["AppendResult", "CausewayClient", "CausewayError", "Lease"]

T = TypeVar("T")
_STRUCTURED = "application/cloudevents+json"
_BATCH = "application/cloudevents-batch+json"


@dataclass(frozen=True, slots=True)
class AppendResult:
    id: str
    source: str
    stream: str
    stream_version: int
    position: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class Lease:
    """A task leased to this worker: ``trigger`` is the event that caused it."""

    task_id: str
    lease: str
    expires_at: str
    task: dict[str, Any]
    trigger: dict[str, Any]


class CausewayError(Exception):
    """The service refused a request; ``problem`` is its RFC 9457 body."""

    def __init__(
        self, status: int, problem: dict[str, Any], *, retry_after_s: float | None = None
    ) -> None:
        super().__init__(f"{status} {problem.get('type', '')}: {problem.get('detail', '')}")
        self.status = status
        self.problem = problem
        self.retry_after_s = retry_after_s  # the answer's Retry-After, in seconds

    def __reduce__(self) -> tuple[Any, ...]:
        # Made again from what it holds (a process pool sends it back to its parent);
        # the default would call it with its message alone.
        return _remade, (self.status, self.problem, self.retry_after_s)


def _remade(status: int, problem: dict[str, Any], retry_after_s: float | None) -> CausewayError:
    return CausewayError(status, problem, retry_after_s=retry_after_s)


class CausewayClient:
    def __init__(self, base_url: str, api_key: str, *, timeout_s: float = 30.0) -> None:
        self._http = httpx2.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout_s,
        )

    def post_event(self, event: dict[str, Any]) -> AppendResult:
        """Append one structured event; an exact re-send returns its stored position."""
        return self._post(orjson.dumps(event), _STRUCTURED)[0]

    def post_batch(self, events: list[dict[str, Any]]) -> list[AppendResult]:
        """Append ``events`` atomically: all are stored, or none and ``CausewayError``."""
        return self._post(orjson.dumps(events), _BATCH)

    def lease(
        self,
        queue: str,
        worker: str,
        *,
        capabilities: dict[str, bool | float] | None = None,
        spot: bool = False,
        labels: dict[str, str] | None = None,
        wait_s: float = 0.0,
        lease_s: float | None = None,
        request_id: str | None = None,
    ) -> Lease | None:
        """The best task of ``queue`` this worker can run, or None (after ``wait_s``).
        ``request_id``: the worker's name for this request, new for each; sent again with
        it after a lost answer, the request gets back what it leased (README)."""
        body = _lease_body(worker, capabilities, spot, labels, wait_s, lease_s, request_id)
        response = self._call("POST", f"/queues/{_segment(queue)}/lease", body)
        return None if response.status_code == 204 else _read(response, _lease_of)

    def lease_many(
        self,
        queue: str,
        worker: str,
        max_tasks: int,
        *,
        capabilities: dict[str, bool | float] | None = None,
        spot: bool = False,
        labels: dict[str, str] | None = None,
        wait_s: float = 0.0,
        lease_s: float | None = None,
        request_id: str | None = None,
    ) -> list[Lease]:
        """Up to ``max_tasks`` (at most 100) of the best tasks of ``queue`` this worker
        can run, each under a lease of its own; empty when there is none (after ``wait_s``).
        ``request_id`` as ``lease`` takes it."""
        body = _lease_body(worker, capabilities, spot, labels, wait_s, lease_s, request_id)
        body["max_tasks"] = max_tasks
        response = self._call("POST", f"/queues/{_segment(queue)}/lease", body)
        if response.status_code == 204:
            return []
        return _read(response, lambda answer: [_lease_of(found) for found in answer["tasks"]])

    def complete_and_lease(
        self,
        queue: str,
        worker: str,
        done: list[tuple[Lease, list[dict[str, Any]]]],
        max_tasks: int,
        *,
        capabilities: dict[str, bool | float] | None = None,
        spot: bool = False,
        labels: dict[str, str] | None = None,
        wait_s: float = 0.0,
        lease_s: float | None = None,
        request_id: str | None = None,
    ) -> tuple[list[dict[str, Any]], list[Lease]]:
        """``complete_many(done)`` and ``lease_many`` in one request (the completions first,
        in the same transaction as the first try to lease): each finished task's answer,
        as ``complete_many`` gives it, and the tasks leased (empty after ``wait_s``). The
        service caps this request's body at ``CAUSEWAY_MAX_JSON_BODY_BYTES`` (413 past it:
        large results go by ``complete_many``). ``request_id`` as ``lease`` takes it: sent
        again, the completions get the answers they got, the leases come back."""
        body = _lease_body(worker, capabilities, spot, labels, wait_s, lease_s, request_id)
        body["max_tasks"] = max_tasks
        body["complete"] = _completions(done)
        response = self._call("POST", f"/queues/{_segment(queue)}/lease", body)
        return _read(
            response,
            lambda answer: (answer["completed"], [_lease_of(found) for found in answer["tasks"]]),
        )

    def heartbeat(self, lease: Lease, *, lease_s: float | None = None) -> None:
        """Extend the lease (raises ``CausewayError`` 409 when it was lost)."""
        body: dict[str, Any] = {"lease": lease.lease}
        if lease_s is not None:
            body["lease_s"] = lease_s
        self._call("POST", f"/tasks/{_segment(lease.task_id)}/heartbeat", body)

    def complete(self, lease: Lease, events: list[dict[str, Any]] | None = None) -> list[int]:
        """Finish the task; ``events`` are appended caused by its trigger. Their positions."""
        response = self._call(
            "POST",
            f"/tasks/{_segment(lease.task_id)}/complete",
            {"lease": lease.lease, "events": events or []},
        )
        return _read(response, lambda answer: [entry["position"] for entry in answer["results"]])

    def fail(self, lease: Lease, error_class: str, message: str) -> dict[str, Any]:
        """Report a failed attempt: ``transient``, ``unknown``, ``data_invalid`` or
        ``model_version_mismatch``. The task as it stands after it (retried or dead)."""
        body = {"lease": lease.lease, "class": error_class, "message": message}
        response = self._call("POST", f"/tasks/{_segment(lease.task_id)}/fail", body)
        return _read(response, _object)

    def complete_many(self, done: list[tuple[Lease, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
        """Finish many tasks (each with its result events) in one request. Each task's
        answer, in order: ``status`` 200 with its ``results``, or its own ``problem``
        (409 ``lease-lost``, ...): one refused does not fail the others."""
        response = self._call("POST", "/tasks/complete", {"tasks": _completions(done)})
        return _read(response, _tasks)

    def fail_many(self, failed: list[tuple[Lease, str, str]]) -> list[dict[str, Any]]:
        """Report many failed attempts ``(lease, class, message)`` in one request; each
        task's answer, in order, as ``complete_many``."""
        tasks = [
            {"task": lease.task_id, "lease": lease.lease, "class": error_class, "message": message}
            for lease, error_class, message in failed
        ]
        return _read(self._call("POST", "/tasks/fail", {"tasks": tasks}), _tasks)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> CausewayClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _post(self, body: bytes, content_type: str) -> list[AppendResult]:
        response = self._http.post("/events", content=body, headers={"Content-Type": content_type})
        _raise_for_problem(response)
        return _read(response, lambda answer: [AppendResult(**entry) for entry in answer["events"]])

    def _call(self, method: str, path: str, body: dict[str, Any]) -> httpx2.Response:
        # A long-poll lease may wait up to its wait_s: give the read that much more time.
        timeout = self._http.timeout.read
        extra = float(body.get("wait_s", 0.0))
        response = self._http.request(
            method,
            path,
            content=orjson.dumps(body),
            headers={"Content-Type": "application/json"},
            timeout=httpx2.Timeout(self._http.timeout.connect, read=(timeout or 30.0) + extra),
        )
        _raise_for_problem(response)
        return response


def _lease_body(
    worker: str,
    capabilities: dict[str, bool | float] | None,
    spot: bool,
    labels: dict[str, str] | None,
    wait_s: float,
    lease_s: float | None,
    request_id: str | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "worker": worker,
        "capabilities": capabilities or {},
        "spot": spot,
        "labels": labels or {},
        "wait_s": wait_s,
    }
    if lease_s is not None:
        body["lease_s"] = lease_s
    if request_id is not None:
        body["request_id"] = request_id
    return body


def _completions(done: list[tuple[Lease, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    return [
        {"task": lease.task_id, "lease": lease.lease, "events": events} for lease, events in done
    ]


def _lease_of(found: dict[str, Any]) -> Lease:
    return Lease(
        found["task"]["id"], found["lease"], found["expires_at"], found["task"], found["trigger"]
    )


def _segment(name: str) -> str:
    """``name`` as one path segment: a queue named ``a/../b`` must not lease from ``b``."""
    return quote(name, safe="")


def _read(response: httpx2.Response, read: Callable[[Any], T]) -> T:
    """``read`` of a success's JSON body; ``CausewayError`` when the body is not what the
    service answers (a proxy's page, say), rather than a JSON or a key error."""
    try:
        return read(orjson.loads(response.content))
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        detail = f"the answer is not the service's ({type(exc).__name__}): {response.text[:200]!r}"
        raise CausewayError(response.status_code, {"detail": detail}) from exc


def _object(answer: Any) -> dict[str, Any]:
    if not isinstance(answer, dict):
        raise TypeError("not a JSON object")
    return answer


def _tasks(answer: Any) -> list[dict[str, Any]]:
    tasks = answer["tasks"]
    if not isinstance(tasks, list):
        raise TypeError("tasks is not a list")
    return tasks


def _raise_for_problem(response: httpx2.Response) -> None:
    if response.status_code >= 400:
        try:
            problem = response.json()
        except ValueError:
            problem = {"detail": response.text}
        if not isinstance(problem, dict):  # a proxy's JSON string, list or number
            problem = {"detail": response.text}
        raise CausewayError(
            response.status_code,
            problem,
            retry_after_s=_seconds(response.headers.get("retry-after")),
        )


def _seconds(retry_after: str | None) -> float | None:
    """A ``Retry-After`` in seconds (its HTTP-date form is read as none)."""
    try:
        seconds = float(retry_after) if retry_after is not None else math.nan
    except ValueError:
        return None
    return max(seconds, 0.0) if math.isfinite(seconds) else None  # "nan" is no number of them
