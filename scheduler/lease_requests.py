"""What a lease request asks for (``Wanted``) and what it gets (``Lease``), and what the
ready scan matches for a worker (``fit_of``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scheduler import decisions as d
from scheduler import tasks as t
from scheduler.placement import OffPeak, WorkerProfile
from scheduler.rows import tasks as rows


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
