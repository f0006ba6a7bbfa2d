"""A worker for the scheduler's queues: lease tasks in batches, run each with a handler,
heartbeat the ones that run long, complete and fail them in batches, and back off when the
service asks to (429, 503 and their ``Retry-After``), when a proxy in front says it is
unwell (500, 502, 504), or when it cannot be reached.

    def detect(lease: Lease) -> list[dict[str, Any]]:
        frame = lease.trigger["data"]
        return [{"id": ..., "source": "/detector", "type": "detection", "data": ...}]

    with Worker("http://127.0.0.1:8000", key, queue="inference", name="gpu-1",
                handler=detect, batch=20) as worker:
        worker.run()   # until worker.stop(), or run(max_tasks=...) / run(until_idle=True)

The handler answers the task's result events (each is appended caused by the task's
trigger), or raises ``TaskFailed(class, message)``; any other exception fails the attempt
as ``unknown``, as do results that cannot be sent as JSON. A failure's message is sent as the service can store it (U+0000 and
unpaired surrogates written out as ``\\u0000``, ``\\udcff``; cut to 4,000 characters).
A worker may run again once a run has ended. Like ``ingest.client``, it imports nothing of
``app`` and speaks only HTTP.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from datetime import datetime
from functools import partial
from types import TracebackType
from typing import Any, TypeVar

import httpx2
import orjson

from ingest.client import CausewayClient, CausewayError, Lease

__all__ = ["TaskFailed", "Worker", "WorkerStats"]

logger = logging.getLogger(__name__)
T = TypeVar("T")
Handler = Callable[[Lease], "list[dict[str, Any]] | None"]
# Answers that say "later", not "never": the service's 429 and 503, what a proxy in front
# answers while the service restarts or is slow (500, 502, 504), and 408 (the request's
# body stalled on its way: nothing of it was taken). Every request the worker sends
# again is answered as the first was (a lease request by its name).
_BUSY = (408, 429, 500, 502, 503, 504)
# Of those, the answers that say nothing was done: the service's own "later" (429, 503)
# and a body that stalled (408). The others may come from a gateway in front, for a
# request the service carried out.
_NOTHING_DONE = (408, 429, 503)
# What a completion is refused with when its task is no longer this worker's to finish.
_LOST = ("/problems/lease-lost", "/problems/not-found")
_INTERRUPTED = "the worker was interrupted (Ctrl-C) before it finished this task"
_MAX_RETRY_AFTER_S = 300.0  # a Retry-After is waited out up to this (one from a proxy too)
_MESSAGE_CAP = 4000  # characters of a failure's message the service takes (POST /tasks/fail)
_CUT = 200  # characters of a message kept when one report alone passes the request cap
# The classes the service takes for a failure (any other refuses the whole batch's report).
_ERROR_CLASSES = ("transient", "unknown", "data_invalid", "model_version_mismatch")


class TaskFailed(Exception):
    """Raised by a handler: the attempt failed with ``error_class`` (``transient``,
    ``unknown``, ``data_invalid`` or ``model_version_mismatch``; another class fails it as
    ``unknown``, the message naming that class)."""

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
        self._stopping = threading.Event()  # stop(): lease no more in the run at hand
        self._running = False
        self.stats = WorkerStats()  # counted over every run of this worker

    def run(self, *, max_tasks: int | None = None, until_idle: bool = False) -> WorkerStats:
        """Work until ``stop()``, until ``max_tasks`` tasks were leased in this run, or
        (``until_idle``) until a lease request finds nothing. What it leased is completed
        or failed first. A batch's completions go with the request that leases the next
        batch (one request a batch, not two), unless there is no next batch to ask for.
        Answers what this run did (``stats`` counts every run); a worker runs once at a
        time (``RuntimeError`` otherwise), and again after a run has ended."""
        with self._lock:
            if self._running:
                raise RuntimeError("this worker is running already")
            self._running = True
        before = WorkerStats(*(getattr(self.stats, f.name) for f in fields(WorkerStats)))
        beats_end = threading.Event()  # the heartbeats end with the run, not with stop()
        beating = threading.Thread(
            target=self._heartbeats, args=(beats_end,), name="heartbeats", daemon=True
        )
        try:
            beating.start()
            self._loop(max_tasks, until_idle, before.leased)
        finally:
            beats_end.set()
            if beating.ident is not None:  # started
                beating.join()
            with self._lock:
                self._held.clear()  # left by a run that raised: their leases lapse
                self._stopping.clear()  # a stop() ends one run: the next one works
                self._running = False
        return WorkerStats(
            *(getattr(self.stats, f.name) - getattr(before, f.name) for f in fields(WorkerStats))
        )

    def _loop(self, max_tasks: int | None, until_idle: bool, leased_before: int) -> None:
        """``run()``'s work: lease, work and complete batch after batch until it ends."""
        wanted_now = partial(self._wanted, max_tasks, leased_before)
        leases: list[Lease] = []
        while True:
            if not leases:
                wanted = wanted_now()
                if not wanted:
                    break
                # One name for the request and its retries: a retry after a lost answer
                # gets the leases that answer held (README, "A lost answer"). Holding
                # nothing, it gives up once stopping.
                leases = self._retrying(
                    partial(self._lease, wanted, uuid.uuid4().hex, time.monotonic()),
                    or_once_stopping=[],
                )
                if not leases:
                    if until_idle:
                        break
                    continue
            done = self._work(leases)
            wanted = wanted_now()
            if done and wanted:
                try:
                    leases = self._retrying(
                        partial(
                            self._complete_and_lease,
                            done,
                            wanted,
                            uuid.uuid4().hex,
                            time.monotonic(),
                        )
                    )
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

    def stop(self) -> None:
        """Stop after the batch at hand (from another thread, or a handler): its tasks are
        still heartbeated, worked and completed. A lease request already waiting (a
        long-poll, ``wait_s`` at most) is answered first, and what it leases is the batch
        at hand; one whose answer was lost is sent again for what it leased. Between runs,
        it stops the next run before that leases anything."""
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

    def _wanted(self, max_tasks: int | None, leased_before: int) -> int:
        """How many tasks to ask for next: none once stopping or once ``max_tasks`` are
        leased since the run began (when ``stats.leased`` was ``leased_before``)."""
        if self._stopping.is_set():
            return 0
        if max_tasks is None:
            return self._batch
        return max(min(self._batch, max_tasks - (self.stats.leased - leased_before)), 0)

    def _lease(self, wanted: int, request_id: str, first_sent: float) -> list[Lease]:
        return self._hold(
            self._client.lease_many(
                self._queue, self._name, wanted, wait_s=self._wait(), lease_s=self._lease_s,
                request_id=request_id, **self._profile,
            ),
            first_sent,
        )  # fmt: skip

    def _complete_and_lease(
        self,
        done: list[tuple[Lease, list[dict[str, Any]]]],
        wanted: int,
        request_id: str,
        first_sent: float,
    ) -> list[Lease]:
        answers, leased = self._client.complete_and_lease(
            self._queue, self._name, done, wanted, wait_s=self._wait(), lease_s=self._lease_s,
            request_id=request_id, **self._profile,
        )  # fmt: skip
        self._finished(done, answers)
        return self._hold(leased, first_sent)

    def _wait(self) -> float:
        return 0.0 if self._stopping.is_set() else self._wait_s

    def _hold(self, leased: list[Lease], first_sent: float) -> list[Lease]:
        """Keep ``leased`` for the heartbeats, and count them. Each lease was granted no
        sooner than the request's first try was sent (``first_sent``, by the monotonic
        clock): its heartbeat is due half its length after that. (Timed from the answer,
        the leases a try sent again got back, granted to the lost first try, lapsed
        before their first heartbeat.)"""
        with self._lock:
            for lease in leased:
                length = _lease_length(lease)
                self._held[lease.task_id] = _Held(lease, length, first_sent + length / 2)
        self.stats.leased += len(leased)
        return leased

    def _work(self, leases: list[Lease]) -> list[tuple[Lease, list[dict[str, Any]]]]:
        """Run the handler on each of ``leases``; report the failures, and answer the
        tasks done with their results (not yet completed)."""
        done: list[tuple[Lease, list[dict[str, Any]]]] = []
        failed: list[tuple[Lease, str, str]] = []
        for n, lease in enumerate(leases):
            try:
                results = _results(self._handler(lease))
                # As the completion sends them, three levels down (a set, a lone surrogate,
                # data nested past what orjson writes inside the request).
                orjson.dumps({"tasks": [{"events": results}]})
                done.append((lease, results))
            except TaskFailed as failure:
                failed.append((lease, *_failure(failure)))
            except Exception as exc:  # a handler's bug fails its task, not the loop
                failed.append((lease, "unknown", _storable(f"{type(exc).__name__}: {_str(exc)}")))
            except BaseException:
                # Ctrl-C (or SystemExit) in a handler: the results of the tasks done go out,
                # and the rest are handed back as failed (transient: retried after the
                # backoff), rather than held by no one until their leases run out.
                failed += [(rest, "transient", _INTERRUPTED) for rest in leases[n:]]
                self._fail(failed)
                self._complete(done)
                raise
        self._fail(failed)
        return done

    def _complete(self, done: list[tuple[Lease, list[dict[str, Any]]]]) -> None:
        """Complete ``done``; a batch past the service's request cap (413) in halves, and
        a task whose results alone pass it failed (``unknown``): its results cannot be
        sent, and every other task's are."""
        if not done:
            return
        try:
            self._finished(done, self._retrying(lambda: self._client.complete_many(done)))
        except CausewayError as refused:
            if refused.status != 413:
                raise
            if len(done) > 1:
                half = len(done) // 2
                self._complete(done[:half])
                self._complete(done[half:])
                return
            [(lease, _)] = done
            message = _storable(f"its results pass the service's request cap: {_str(refused)}")
            self._fail([(lease, "unknown", message)])

    def _fail(self, failed: list[tuple[Lease, str, str]]) -> None:
        """Report ``failed``; a batch past the service's request cap (413: a hundred
        messages of 4,000 characters are 400 KB) in halves, and a lone report past it with
        its message cut to ``_CUT`` characters."""
        if not failed:
            return
        try:
            answers = self._retrying(lambda: self._client.fail_many(failed))
        except CausewayError as refused:
            if refused.status != 413 or (len(failed) == 1 and len(failed[0][2]) <= _CUT):
                raise
            if len(failed) > 1:
                half = len(failed) // 2
                self._fail(failed[:half])
                self._fail(failed[half:])
                return
            [(lease, error_class, message)] = failed
            self._fail([(lease, error_class, message[:_CUT])])
            return
        self._count(answers, "failed")
        self._release([lease for lease, _, _ in failed])

    def _finished(
        self, done: list[tuple[Lease, list[dict[str, Any]]]], answers: list[dict[str, Any]]
    ) -> None:
        """Count what ``answers`` say of ``done``. A task whose results the service refused
        (a cause it does not hold, no CloudEvent) is failed (``unknown``) with its reason:
        left as it was, it stayed leased to no one until its lease ran out, and died as
        "lease expired", the reason lost."""
        leases = {lease.task_id: lease for lease, _ in done}
        refused = [
            a for a in answers
            if a["status"] != 200 and a["problem"].get("type") not in _LOST
            and a["task"] in leases
        ]  # fmt: skip
        self._count([a for a in answers if a not in refused], "completed")
        self._fail([
            (leases[a["task"]], "unknown",
             _storable(f"its results were refused: {a['problem'].get('detail')}"))
            for a in refused
        ])  # fmt: skip
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

    def _heartbeats(self, end: threading.Event) -> None:
        """Extend the leases held past half their length, every half second until ``end``."""
        while not end.wait(0.5):
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
                    else:  # the lease is lost (404, 409): its completion will say so
                        held.renew_at = float("inf")
                except httpx2.TransportError:
                    held.renew_at = time.monotonic() + 1.0

    def _retrying(self, call: Callable[[], T], *, or_once_stopping: T | None = None) -> T:
        """``call()``, again after a pause while the service answers "later" (``_BUSY``:
        as long as its ``Retry-After`` says, five minutes at most, else a doubling pause
        with jitter, ``max_backoff_s`` at most) or is unreachable. With
        ``or_once_stopping``, that is the answer once ``stop()`` is called (a lease
        request holding nothing: a stop during an outage ended the run only after it)."""
        attempt = 0
        while True:
            try:
                return call()
            except CausewayError as refused:
                if refused.status not in _BUSY:
                    raise
                pause = refused.retry_after_s
                # The service's own "later" leased nothing; a gateway's (500, 502, 504, a
                # cut request) may stand for an answer that did, lost on its way back.
                unleased = refused.status in _NOTHING_DONE
            except httpx2.TransportError as exc:
                pause = None
                unleased = isinstance(exc, httpx2.ConnectError)  # it never got there
            attempt += 1
            self.stats.backoffs += 1
            if pause is None:
                pause = doubling_pause(attempt, self._max_backoff_s)
            pause = min(pause, _MAX_RETRY_AFTER_S)
            if or_once_stopping is None or not unleased:
                # Once stopping, a lease request whose answer was lost is sent again (not
                # waiting, ``_wait``) for what it leased: left, those tasks waited out
                # their leases and lost an attempt, or were dead-lettered unrun.
                time.sleep(pause)
            elif self._stopping.wait(pause):
                return or_once_stopping


def doubling_pause(attempt: int, cap_s: float) -> float:
    """The pause before try ``attempt + 1``: 0.1 s doubled per try, ``cap_s`` at most, with
    jitter. (The exponent is capped too: from the 1,024th try, about 6 h of outage at 30 s
    a try, 2**attempt was past a float, and the run ended with an OverflowError.)"""
    doubled: float = 0.1 * 2.0 ** min(attempt, 30)
    return min(cap_s, doubled) * random.uniform(0.5, 1.0)  # noqa: S311 - jitter


def _results(answer: object) -> list[dict[str, Any]]:
    """A handler's answer as the events it lists; ``TypeError`` (which fails the task) for
    one that lists no events: an event alone, not in a list, or an item that is no object."""
    if answer is None:
        return []
    if isinstance(answer, dict | str | bytes) or not isinstance(answer, Iterable):
        raise TypeError(f"the handler answered a {type(answer).__name__}, not a list of events")
    results = list(answer)
    for item in results:
        if not isinstance(item, dict):
            raise TypeError(f"a result is a {type(item).__name__}, not an event (a dict)")
    return results


def _failure(failure: TaskFailed) -> tuple[str, str]:
    """The class and message to report for ``failure``; a class the service does not take
    (it would refuse the whole batch's report) is reported as ``unknown``, naming it."""
    error_class, message = failure.error_class, _str(failure.message)
    if error_class not in _ERROR_CLASSES:
        logger.warning("TaskFailed with the unknown class %r: failed as unknown", error_class)
        message = f"TaskFailed({_str(error_class)!r}): {message}"
        error_class = "unknown"
    return error_class, _storable(message)


def _storable(message: str) -> str:
    """``message`` as the service can take and store it: U+0000 (which PostgreSQL cannot
    store) written out as ``\\u0000``, an unpaired surrogate (which is not UTF-8, nor
    JSON) as ``\\udcff``; then cut to the service's cap."""
    text = message.replace("\x00", "\\u0000")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:_MESSAGE_CAP]


def _str(value: object) -> str:
    """``str(value)``, or a stand-in when its ``__str__`` raises (a handler's bug)."""
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__} that cannot be shown>"


def _lease_length(lease: Lease) -> float:
    """How long ``lease`` lasts, by the service's clock alone: from when it was granted to
    when it ends (a service older than ``leased_at``: until it ends, by this machine's
    clock). By this machine's clock alone, one a minute behind the service's took a lease
    of 30 s for 90, and heartbeat it too late: the lease was lost."""
    end = datetime.fromisoformat(lease.expires_at)
    granted = lease.task.get("leased_at")
    start = datetime.fromisoformat(granted) if granted else datetime.now(end.tzinfo)
    return max((end - start).total_seconds(), 1.0)
