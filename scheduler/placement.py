"""Which worker may take which task: requirements against a capability profile, and the
priority classes that decide between spot and on-demand capacity.

- A task's numeric requirement ``R: n`` needs the worker's capability ``R`` to be at least
  ``n`` (``model_size_gb`` counts against the free ``gpu_memory_gb``); a flag requirement
  (``fp16: true``) needs the worker to report it true; ``labels`` must all equal the
  worker's node labels.
- Priority 8 and 9 are **guaranteed**: never offered to spot (pre-emptible) workers.
- During the configured off-peak hours, tasks of priority ``off_peak_max_priority`` and
  below go to spot workers only, leaving on-demand capacity to the rest.

``TaskQueue.lease`` applies them in its SQL, so a lease never reads a task it may not take.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.errors import BadRequest

GUARANTEED_ABOVE = 7
_HOURS = re.compile(r"^\s*(\d{1,2})\s*-\s*(\d{1,2})\s*$")


@dataclass(frozen=True, slots=True)
class WorkerProfile:
    worker: str
    numbers: dict[str, float] = field(default_factory=dict)
    flags: frozenset[str] = frozenset()
    labels: dict[str, str] = field(default_factory=dict)
    spot: bool = False

    @classmethod
    def parse(
        cls, worker: str, capabilities: dict[str, Any], *, spot: bool, labels: dict[str, str]
    ) -> WorkerProfile:
        numbers: dict[str, float] = {}
        flags: set[str] = set()
        for key, value in capabilities.items():
            if isinstance(value, bool):
                if value:
                    flags.add(key)
            elif isinstance(value, int | float):
                numbers[key] = float(value)
            else:
                raise BadRequest(f"capabilities.{key} must be true/false or a number")
        return cls(worker, numbers, frozenset(flags), dict(labels), spot)


@dataclass(frozen=True, slots=True)
class OffPeak:
    """Hours of the day (UTC, ``start-end``, wrapping past midnight) when low-priority
    work is kept for spot workers."""

    start_hour: int
    end_hour: int
    max_priority: int

    @classmethod
    def parse(cls, hours: str | None, max_priority: int) -> OffPeak | None:
        if not hours:
            return None
        m = _HOURS.match(hours)
        if not m or not (0 <= int(m.group(1)) <= 23 and 0 <= int(m.group(2)) <= 24):
            raise ValueError(f"off-peak hours are 'START-END' in whole UTC hours, got {hours!r}")
        return cls(int(m.group(1)), int(m.group(2)), max_priority)

    def is_active(self, now: datetime) -> bool:
        hour = now.hour
        if self.start_hour <= self.end_hour:
            return self.start_hour <= hour < self.end_hour
        return hour >= self.start_hour or hour < self.end_hour
