"""What a lease request asks for (``Wanted``) and what it gets (``Lease``), and what the
ready scan matches for a worker (``fit_of``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from app.errors import Conflict
from scheduler import decisions as d
from scheduler import tasks as t
from scheduler.placement import OffPeak, WorkerProfile
from scheduler.rows import tasks as rows

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Wanted:
    """What a lease request asks for: up to ``max_tasks`` of the best ready tasks of
    ``queue`` that ``profile`` can run, each leased for ``lease_s``. ``request`` is the
    worker's name for the request, if it gave one: sent again (its answer lost), the
    request gets the tasks it leased, while it still holds them, and no others."""

    queue: str
    profile: WorkerProfile
    lease_s: float
    off_peak: OffPeak | None
    max_tasks: int
    request: str | None = None

    def holding(self, held: list[T]) -> list[T]:
        """What the request sent again holds (``held``), given back whole: one asking for
        fewer than it leased (a smaller ``max_tasks``, or none) is a ``Conflict``, as an
        answer of fewer would leave the rest leased and named by no answer."""
        if len(held) > self.max_tasks:
            raise Conflict(
                f"lease request {self.request!r} leased {len(held)} tasks, which it still "
                f"holds; send it again with max_tasks of at least {len(held)}",
                request=self.request,
                leased=len(held),
            )
        return held


@dataclass(frozen=True, slots=True)
class Lease:
    task: t.TaskState
    lease_id: str
    expires_at: datetime
    trigger: str  # the trigger event, structured CloudEvent JSON


def fit_of(profile: WorkerProfile, off_peak: OffPeak | None, now: datetime) -> rows.Fit:
    """What the lease scan matches for ``profile`` at ``now``."""
    lowest, highest = d.lease_band(profile, off_peak, now)
    return rows.Fit(profile.numbers, sorted(profile.flags), profile.labels, lowest, highest)
