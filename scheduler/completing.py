"""Completing tasks in batches: what ``TaskQueue.complete_many`` and
``TaskQueue.complete_and_lease`` share.

``Completing.start`` locks the tasks' rows (in id order, so two batches never deadlock),
reads their triggers' trace contexts (results continue the trigger's trace) and answers
what can be answered before anything is appended: a lease lost, a task unknown, a
completion that went through already under the same lease (its answer was lost: the
retry gets the same answer, provided it sends the same results). What is left is
``ready``: each task with the events its completion appends (its results, then the
decision). ``settle`` folds them once appended; the caller appends them, alone
(``finish``) or in one group with other decisions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from app.errors import AppError, IdConflict, LeaseLost, VersionConflict
from app.store import decision_reads as log
from scheduler import decisions as d
from scheduler import lagging
from scheduler import tasks as t
from scheduler.rows import tasks as rows

if TYPE_CHECKING:
    from app.db.engine import Connection
    from app.store.records import Appended, NewEvent
    from app.telemetry.tracing import TraceContext

Completed = tuple[t.TaskState, list[int]]  # the task completed, and its results' positions
Item = tuple[str, str, Sequence["NewEvent"]]  # a task, its lease, and its results
Append = Callable[[str, list["NewEvent"]], Awaitable[list["Appended"]]]
Commit = Callable[
    [str, t.TaskState, list["NewEvent"]], Awaitable[tuple[t.TaskState, list["Appended"]]]
]
# The tasks' rows as locked (None: no such task), and their triggers' trace contexts.
Locked = tuple[dict[str, t.TaskState | None], dict[str, "TraceContext"]]


def sorted_ids(items: Sequence[Item]) -> list[str]:
    """The tasks of ``items`` in the order their rows are locked (by id: two batches
    never deadlock)."""
    return sorted(item[0] for item in items)


@dataclass(frozen=True, slots=True)
class Ready:
    """A task whose completion is decided: where it is among the items, the task as
    locked, the events to append (its results, then its completion), and the item."""

    index: int
    state: t.TaskState
    events: list[NewEvent]
    item: Item  # as the caller gave it: decided again on the log's state if need be


@dataclass(slots=True)
class Completing:
    """A batch of completions on its way: each item's outcome once known, by its index in
    the batch; the tasks ``ready`` to append; the triggers' trace contexts."""

    size: int
    traces: dict[str, TraceContext]
    outcomes: dict[int, Completed | AppError] = field(default_factory=dict)
    ready: list[Ready] = field(default_factory=list)

    @classmethod
    async def start(
        cls,
        conn: Connection,
        append: Append,
        tenant: str,
        items: Sequence[Item],
        locked: Locked | None = None,
    ) -> Completing:
        """``locked``: the items' rows and their triggers' trace contexts, when the caller
        locked them (``rows.fetch_tasks_locked`` or a statement that does as it does).
        The rows are locked in id order, but ``ready`` keeps the items' order: a result
        may name as its cause, or append to the stream of, one of an item before it."""
        if locked is None:
            locked = await rows.fetch_tasks_locked(conn, tenant, sorted_ids(items))
        states, traces = locked
        batch = cls(len(items), traces)
        for n, item in enumerate(items):
            ready = await batch._take(conn, append, tenant, n, item, states[item[0]])
            if ready is not None:
                batch.ready.append(ready)
        return batch

    async def _take(
        self,
        conn: Connection,
        append: Append,
        tenant: str,
        n: int,
        item: Item,
        row: t.TaskState | None,
        *,
        again: bool = False,
    ) -> Ready | None:
        """Item ``n`` ready to append, or None when it is answered already (a lease lost,
        a completion sent again). A lease lost on a row that lags the log (``lagging``) is
        decided again on the log's state, once."""
        task_id, lease_id, results = item
        try:
            if row is not None and row.state == "completed":
                last = await log.read_entry(conn, tenant, row.last_decision_id)
                first = d.completed_data(last)
                if first is not None and first.get("lease") == lease_id:
                    self.outcomes[n] = (row, await self._again(append, tenant, row, first, results))
                    return None
            now = datetime.now(UTC)
            state = d.holding(row, task_id, lease_id, now)
            caused = d.caused_by_trigger(state, results, self.traces)
            return Ready(n, state, [*caused, d.completion(state, lease_id, caused, at=now)], item)
        except AppError as refused:
            lagged = not again and isinstance(refused, LeaseLost)
            if lagged and (logged := await lagging.caught_up(conn, tenant, row)) is not None:
                return await self._take(conn, append, tenant, n, item, logged, again=True)
            self.outcomes[n] = refused
            return None

    async def _again(
        self,
        append: Append,
        tenant: str,
        state: t.TaskState,
        first: dict[str, object],
        results: Sequence[NewEvent],
    ) -> list[int]:
        """The positions of the results of the completion ``first``, which ``results``
        repeat: the same ids in the same order, each with the content stored (the log
        answers a re-send with where it is, and refuses other content under its id)."""
        caused = d.caused_by_trigger(state, results, self.traces)
        d.check_same_results(state, first, caused)
        if not caused:
            return []
        appended = await append(tenant, caused)
        if not all(a.duplicate for a in appended):  # pragma: no cover - stored together
            raise RuntimeError(f"task {state.id!r}: a result of its completion was not stored")
        return [a.position for a in appended]

    def events(self) -> list[NewEvent]:
        """What the ready tasks append, in order."""
        return [e for ready in self.ready for e in ready.events]

    def settle(self, appended: Sequence[Appended]) -> list[t.TaskState]:
        """The ready tasks once their events went where ``appended`` says (in the order of
        ``events``), each outcome recorded; the rows to write."""
        after = []
        for ready in self.ready:
            mine, appended = appended[: len(ready.events)], appended[len(ready.events) :]
            last = ready.events[-1]
            done = t.fold(ready.state, last.type, last.data, mine[-1].position)
            after.append(done)
            self.outcomes[ready.index] = (done, [a.position for a in mine[:-1]])
        self.ready = []
        return after

    async def finish(self, conn: Connection, append: Append, commit: Commit, tenant: str) -> None:
        """Append and write what is ready, as one group when the log takes it whole, else
        each task on its own (one refused fails its task alone)."""
        if len(self.ready) > 1:
            try:
                appended = await append(tenant, self.events())
            except AppError:
                pass  # one of them is refused: each is committed on its own below
            else:
                await rows.write_tasks(conn, self.settle(appended))
                return
        ready, self.ready = self.ready, []
        for one in ready:
            await self._commit(conn, append, commit, tenant, one)

    async def _commit(
        self,
        conn: Connection,
        append: Append,
        commit: Commit,
        tenant: str,
        ready: Ready,
        *,
        again: bool = False,
    ) -> None:
        """Append and write ``ready`` alone. Refused by the log because its row lags it
        (a decision appended, its row not written: ``lagging``), it is decided again on
        the log's state, once: a completion sent again is then answered as before."""
        try:
            done, mine = await commit(tenant, ready.state, ready.events)
            self.outcomes[ready.index] = (done, [a.position for a in mine[:-1]])
            return
        except (VersionConflict, IdConflict) as refused:
            logged = None if again else await lagging.caught_up(conn, tenant, ready.state)
            if logged is None:
                self.outcomes[ready.index] = refused
                return
        except AppError as refused:
            self.outcomes[ready.index] = refused
            return
        retaken = await self._take(
            conn, append, tenant, ready.index, ready.item, logged, again=True
        )
        if retaken is not None:
            await self._commit(conn, append, commit, tenant, retaken, again=True)

    def answers(self) -> list[Completed | AppError]:
        """Each item's outcome, in the order of the items."""
        return [self.outcomes[n] for n in range(self.size)]
