"""Autoscale advice: a PID controller per queue, from observed task latency to a
recommended worker count (the figure an HPA or KEDA can scale inference on).

Each tick measures the queue's latency, the longer of the mean wait of the tasks leased
since the last tick (ready until leased) and the age of its oldest ready task, so a queue
nobody serves still reads as slow. The error is relative to the target (``(observed -
target) / target``), so one set of gains fits queues with targets of 1 s or 1 min. The
output is positional: ``min_workers + kp*e + ki*integral + kd*de/dt``, clamped to
``[min_workers, max_workers]``, and the recommendation moves at most ``max_step`` workers
per tick (unless a bound lowered or raised since holds it: the bounds win); when a tick
is more than 2.5 targets long, the error is scaled by 2.5 targets / tick, as one tick
short of workers would read as many targets of latency; while either limit holds the output back, the integral does not grow
(conditional integration, the anti-windup), so nothing builds up behind a limit to
overshoot with, or to lag with when the load drops. A tick that changes it is
recorded as a ``causeway.queue.autoscale_changed`` event.

Latency alone cannot tell "just enough workers" from "too many": with either, tasks wait
about nothing, so the error pushed the advice down to the minimum, a backlog grew, and
the advice swung by ``max_step`` for ever (a load needing 2 workers: 1, 5, 1, 5, ... with
the defaults). So the advice never goes below the workers busy with the queue at the
tick (those holding an unexpired lease of it, counted by name); while that floor holds it
up, the integral does not grow either.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from app.db.engine import Connection
from app.store.log import EventLog
from app.store.records import NewEvent
from scheduler.rows import autoscale as rows

AUTOSCALE_CHANGED = "causeway.queue.autoscale_changed"
_TICKS_OF_TARGET = 2.5  # past this many targets a tick, the error is scaled down
_SOURCE = "causeway:scheduler"


@dataclass(frozen=True, slots=True)
class PidState:
    recommended: int
    integral: float = 0.0
    last_error: float = 0.0
    observed_s: float = 0.0


@dataclass(frozen=True, slots=True)
class PidController:
    target_s: float
    min_workers: int = 1
    max_workers: int = 64
    max_step: int = 4
    kp: float = 1.0
    ki: float = 0.1
    kd: float = 0.0
    deadband: float = 0.25

    def step(self, state: PidState, observed_s: float, dt_s: float, busy: float = 0.0) -> PidState:
        """The next state after ``dt_s`` seconds that observed ``observed_s`` of latency,
        with ``busy`` workers busy at its end. A state holding an infinite or NaN term (an
        earlier release took targets so small that the error overflowed, and stored it)
        starts over: stepped from it, every step was NaN and failed for good."""
        if not (math.isfinite(state.integral) and math.isfinite(state.last_error)):
            state = replace(state, integral=0.0, last_error=0.0)
        error = (observed_s - self.target_s) / self.target_s
        if abs(error) <= self.deadband:
            error = 0.0  # close enough: hold, rather than chase measurement noise
        elif dt_s > 0:
            # A tick much longer than the target: one tick short of workers leaves a
            # backlog that reads as many targets of latency, and the advice swung by
            # max_step each tick for ever (1 s target, 15 s ticks: 10, 14, 10, ...). Past
            # 2.5 targets a tick, the error counts in that (it settles, within one
            # worker, for targets of 0.5 s to 1 min and ticks of 5 s to 30 s).
            error *= min(1.0, _TICKS_OF_TARGET * self.target_s / dt_s)
        derivative = (error - state.last_error) / dt_s if dt_s > 0 else 0.0
        integral = state.integral + error * dt_s
        desired = self.min_workers + self.kp * error + self.ki * integral + self.kd * derivative
        clamped = min(max(desired, self.min_workers), self.max_workers)
        lo, hi = state.recommended - self.max_step, state.recommended + self.max_step
        floor = min(math.ceil(busy), hi)  # no fewer than are busy (the module's docstring)
        # The bounds last: a limit lowered since the last tick holds at once.
        stepped = min(
            max(int(min(max(round(clamped), lo), hi)), floor, self.min_workers), self.max_workers
        )
        if desired != clamped or round(clamped) != stepped:
            # Held back by the bounds, the step limit or the floor: integrating further
            # would only wind up, and the advice would overshoot once it caught up.
            integral = state.integral
        return PidState(stepped, integral, error, observed_s)


@dataclass(frozen=True, slots=True)
class Advice:
    queue: str
    recommended: int
    observed_s: float
    target_s: float
    updated_at: datetime | None


class AutoscaleAdvisor:
    def __init__(self, conn: Connection, controller: PidController) -> None:
        self._conn = conn
        self._controller = controller

    async def read(self, tenant: str, queue: str) -> Advice:
        row = await rows.fetch_autoscale(self._conn, tenant, queue)
        if row is None:
            return Advice(queue, self._controller.min_workers, 0.0, self._controller.target_s, None)
        return Advice(
            queue, row.recommended, row.observed_s, self._controller.target_s, row.updated_at
        )

    async def read_active_queues(self) -> list[tuple[str, str]]:
        """(tenant, queue) of every queue with work, or advised before, in a fixed order
        (so processes advising at once take their rows in the same order)."""
        return await rows.read_active_queues(self._conn)

    async def advise(
        self, tenant: str, queue: str, *, interval_s: float, now: datetime | None = None
    ) -> bool:
        """Step the queue's controller if its last advice is older than ``interval_s``;
        whether it did. Safe in several processes: the queue's row is taken with SKIP
        LOCKED, and a fresh one is left alone."""
        return await self._advise(
            tenant, queue, now=now or datetime.now(UTC), interval_s=interval_s
        )

    async def _advise(self, tenant: str, queue: str, *, now: datetime, interval_s: float) -> bool:
        seed = rows.AutoscaleRow(
            self._controller.min_workers, 0.0, 0.0, 0.0, now - timedelta(seconds=interval_s)
        )
        row = await rows.fetch_autoscale_locked(self._conn, tenant, queue, seed=seed)
        if row is None or (now - row.updated_at).total_seconds() < interval_s * 0.9:
            return False
        observed = await rows.read_latency_s(
            self._conn, tenant, queue, since=row.updated_at, now=now
        )
        busy = await rows.count_busy_workers(self._conn, tenant, queue, now=now)
        before = PidState(row.recommended, row.integral, row.last_error, row.observed_s)
        dt = (now - row.updated_at).total_seconds()
        after = self._controller.step(before, observed, dt, busy)
        stepped = rows.AutoscaleRow(
            after.recommended, after.integral, after.last_error, observed, now
        )
        await rows.write_autoscale(self._conn, tenant, queue, stepped)
        if after.recommended != before.recommended:
            await EventLog(self._conn).append(
                tenant, [self._changed(queue, before.recommended, after, now)]
            )
        return True

    def _changed(self, queue: str, previous: int, after: PidState, now: datetime) -> NewEvent:
        return NewEvent(
            id=f"causeway:autoscale:{uuid.uuid4().hex}",
            source=_SOURCE,
            type=AUTOSCALE_CHANGED,
            stream=f"causeway:queue:{queue}",
            time=now.isoformat(),
            time_value=now,
            has_data=True,
            data={
                "queue": queue,
                "recommended": after.recommended,
                "previous": previous,
                "observed_latency_s": after.observed_s,
                "target_latency_s": self._controller.target_s,
            },
        )
