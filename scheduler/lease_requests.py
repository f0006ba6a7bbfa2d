"""What a lease request asks for (``Wanted``) and what it gets (``Lease``), and what the
ready scan matches for a worker (``fit_of``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from app.db.engine import Connection
from app.errors import Conflict
from scheduler import decisions as d
from scheduler import lagging
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

    def held_by(self, now: datetime) -> rows.HeldBy:
        """The request as the rows of what it holds name it, at ``now``."""
        return rows.HeldBy(self.request or "", self.queue, self.profile.worker, now)


async def fetch_held(conn: Connection, tenant: str, wanted: Wanted) -> list[t.TaskState]:
    """The tasks ``wanted.request`` leased in its queue that its worker still holds
    (unexpired), best first: as their rows show them, or, when the rows show none, as
    the log does (a try that appended its leases and failed before it wrote their rows:
    ``lagging``)."""
    by = wanted.held_by(datetime.now(UTC))
    held = await rows.fetch_held_by_request(
        conn, tenant, by.queue, by.worker, by.request, now=by.now
    )
    return held or await lagging.held_in_log(conn, tenant, by)


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
