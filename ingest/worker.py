"""A worker for the scheduler's queues: lease tasks in batches, run each with a handler,
heartbeat the ones that run long, complete and fail them in batches, and back off when the
service asks to (429, 503 and their ``Retry-After``) or cannot be reached.

    def detect(lease: Lease) -> list[dict[str, Any]]:
        frame = lease.trigger["data"]
        return [{"id": ..., "source": "/detector", "type": "detection", "data": ...}]

    with Worker("http://127.0.0.1:8000", key, queue="inference", name="gpu-1",
                handler=detect, batch=20) as worker:
        worker.run()   # until worker.stop(), or run(max_tasks=...) / run(until_idle=True)

The handler answers the task's result events (each is appended caused by the task's
trigger), or raises ``TaskFailed(class, message)``; any other exception fails the attempt
as ``unknown``. Like ``ingest.client``, it imports nothing of ``app`` and speaks only HTTP.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from types import TracebackType
from typing import Any, TypeVar

import httpx2

from ingest.client import CausewayClient, CausewayError, Lease

__all__ = ["TaskFailed", "Worker", "WorkerStats"]

logger = logging.getLogger(__name__)
T = TypeVar("T")
Handler = Callable[[Lease], "list[dict[str, Any]] | None"]
_BUSY = (429, 503)  # answers that say "later", not "never"


class TaskFailed(Exception):
    """Raised by a handler: the attempt failed with ``error_class`` (``transient``,
    ``unknown``, ``data_invalid`` or ``model_version_mismatch``)."""

    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message


@dataclass(slots=True)
class WorkerStats:
    leased: int = 0
    completed: int = 0
    failed: int = 0
    lost: int = 0  # completions or failures the service refused (the lease was lost, ...)
    backoffs: int = 0


@dataclass(slots=True)
class _Held:
    lease: Lease
    length_s: float
    renew_at: float  # time.monotonic() at which to heartbeat it


class Worker:
    """``batch``: tasks leased (and then completed) per request, at most 100. ``wait_s``:
    how long one lease request long-polls. A task still held after half its lease is
    heartbeated (by a thread of the worker's own, on a client of its own), so a long task,
    or one waiting its turn in a batch, keeps its lease."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        queue: str,
        name: str,
        handler: Handler,
        batch: int = 10,
        wait_s: float = 10.0,
        lease_s: float | None = None,
        capabilities: dict[str, bool | float] | None = None,
        spot: bool = False,
        labels: dict[str, str] | None = None,
        max_backoff_s: float = 30.0,
        timeout_s: float = 30.0,
    ) -> None:
        if not 1 <= batch <= 100:
            raise ValueError("batch must be between 1 and 100")
        self._client = CausewayClient(base_url, api_key, timeout_s=timeout_s)
        self._beats = CausewayClient(base_url, api_key, timeout_s=timeout_s)
        self._queue, self._name, self._handler = queue, name, handler
        self._batch, self._wait_s, self._lease_s = batch, wait_s, lease_s
        self._profile: dict[str, Any] = {
            "capabilities": capabilities,
            "spot": spot,
            "labels": labels,
        }
        self._max_backoff_s = max_backoff_s
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.stats = WorkerStats()

    def run(self, *, max_tasks: int | None = None, until_idle: bool = False) -> WorkerStats:
        """Work until ``stop()``, until ``max_tasks`` tasks were leased, or (``until_idle``)
        until a lease request finds nothing. What it leased is completed or failed first.
        A batch's completions go with the request that leases the next batch (one request
        a batch, not two), unless there is no next batch to ask for."""
        beating = threading.Thread(target=self._heartbeats, name="heartbeats", daemon=True)
        beating.start()
        try:
            leases: list[Lease] = []
            while True:
                if not leases:
                    wanted = self._wanted(max_tasks)
                    if not wanted:
                        break
                    leases = self._retrying(partial(self._lease, wanted))
                    if not leases:
                        if until_idle:
                            break
                        continue
                done = self._work(leases)
                wanted = self._wanted(max_tasks)
                if done and wanted:
                    try:
                        leases = self._retrying(partial(self._complete_and_lease, done, wanted))
                    except CausewayError as refused:
                        if refused.status != 413:
                            raise
                        self._complete(done)  # past the lease request's cap: on their own
                        leases = []
                        continue
                    if not leases and until_idle:
                        break
                else:
                    self._complete(done)
                    leases = []
        finally:
            self._stopping.set()
            beating.join()
        return self.stats

    def stop(self) -> None:
        """Stop after the batch at hand (from another thread, or a handler)."""
        self._stopping.set()

    def close(self) -> None:
        self._client.close()
        self._beats.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _wanted(self, max_tasks: int | None) -> int:
        """How many tasks to ask for next: none once stopping or ``max_tasks`` are leased."""
        if self._stopping.is_set():
            return 0
        if max_tasks is None:
            return self._batch
        return max(min(self._batch, max_tasks - self.stats.leased), 0)

    def _lease(self, wanted: int) -> list[Lease]:
        return self._hold(
            self._client.lease_many(
                self._queue, self._name, wanted, wait_s=self._wait(), lease_s=self._lease_s,
                **self._profile,
            )
        )  # fmt: skip

    def _complete_and_lease(
        self, done: list[tuple[Lease, list[dict[str, Any]]]], wanted: int
    ) -> list[Lease]:
        answers, leased = self._client.complete_and_lease(
            self._queue, self._name, done, wanted, wait_s=self._wait(), lease_s=self._lease_s,
            **self._profile,
        )  # fmt: skip
        self._finished(done, answers)
        return self._hold(leased)

    def _wait(self) -> float:
        return 0.0 if self._stopping.is_set() else self._wait_s

    def _hold(self, leased: list[Lease]) -> list[Lease]:
        """Keep ``leased`` for the heartbeats, and count them."""
        now = time.monotonic()
        with self._lock:
            for lease in leased:
                length = _seconds_until(lease.expires_at)
                self._held[lease.task_id] = _Held(lease, length, now + length / 2)
        self.stats.leased += len(leased)
        return leased

    def _work(self, leases: list[Lease]) -> list[tuple[Lease, list[dict[str, Any]]]]:
        """Run the handler on each of ``leases``; report the failures, and answer the
        tasks done with their results (not yet completed)."""
        done: list[tuple[Lease, list[dict[str, Any]]]] = []
        failed: list[tuple[Lease, str, str]] = []
        for lease in leases:
            try:
                done.append((lease, list(self._handler(lease) or [])))
            except TaskFailed as failure:
                failed.append((lease, failure.error_class, failure.message[:4000]))
            except Exception as exc:  # a handler's bug fails its task, not the loop
                failed.append((lease, "unknown", f"{type(exc).__name__}: {exc}"[:4000]))
        if failed:
            answers = self._retrying(lambda: self._client.fail_many(failed))
            self._count(answers, "failed")
            self._release([lease for lease, _, _ in failed])
        return done

    def _complete(self, done: list[tuple[Lease, list[dict[str, Any]]]]) -> None:
        if done:
            self._finished(done, self._retrying(lambda: self._client.complete_many(done)))

    def _finished(
        self, done: list[tuple[Lease, list[dict[str, Any]]]], answers: list[dict[str, Any]]
    ) -> None:
        self._count(answers, "completed")
        self._release([lease for lease, _ in done])

    def _release(self, leases: list[Lease]) -> None:
        with self._lock:
            for lease in leases:
                self._held.pop(lease.task_id, None)

    def _count(self, answers: list[dict[str, Any]], what: str) -> None:
        for answer in answers:
            if answer["status"] == 200:
                setattr(self.stats, what, getattr(self.stats, what) + 1)
            else:
                self.stats.lost += 1
                logger.warning("task %s: %s", answer["task"], answer["problem"].get("detail"))

    def _heartbeats(self) -> None:
        while not self._stopping.wait(0.5):
            now = time.monotonic()
            with self._lock:
                due = [held for held in self._held.values() if held.renew_at <= now]
            for held in due:
                try:
                    self._beats.heartbeat(held.lease)
                    held.renew_at = time.monotonic() + held.length_s / 2
                except CausewayError as refused:
                    if refused.status in _BUSY:
                        held.renew_at = time.monotonic() + 1.0
                    else:  # the lease is lost: its completion will say so
                        held.renew_at = float("inf")
                except httpx2.TransportError:
                    held.renew_at = time.monotonic() + 1.0

    def _retrying(self, call: Callable[[], T]) -> T:
        """``call()``, again after a pause while the service answers 429 or 503 (as long
        as its ``Retry-After`` says, else a doubling pause with jitter) or is unreachable."""
        attempt = 0
        while True:
            try:
                return call()
            except CausewayError as refused:
                if refused.status not in _BUSY:
                    raise
                pause = refused.retry_after_s
            except httpx2.TransportError:
                pause = None
            attempt += 1
            self.stats.backoffs += 1
            if pause is None:
                pause = min(self._max_backoff_s, 0.1 * 2**attempt) * random.uniform(0.5, 1.0)  # noqa: S311 - jitter
            time.sleep(min(pause, self._max_backoff_s))


def _seconds_until(expires_at: str) -> float:
    """How long a lease that ends at ``expires_at`` (ISO 8601, with its offset) has left."""
    end = datetime.fromisoformat(expires_at)
    return max((end - datetime.now(end.tzinfo)).total_seconds(), 1.0)
