"""What one appender knows of the log's tail, so that it can plan a group before the head
is locked and write it in one round trip (``writes.write_group``).

An appender that is the only writer knows where the head is (where its own last group
left it), the version of every stream it wrote and the position of every event it wrote.
What it did not write, it looks up first (``log.fetch_facts``: other streams' versions,
causes' positions, models' registrations). Those facts cannot go stale behind its back
unless someone else appends; and then the head is not where the appender planned on,
``causeway_append`` refuses the group (``HeadMoved``), and the appender plans it again
under the lock (``log.append_on``), which also tells it whether others still append.

The tail plans ahead: a group is planned on the head the group before it will leave,
before that one is written, so that several can be on their way to the database at once.
If one of them fails, every later one fails the head check too, and ``forget`` drops what
they claimed. The tail takes no decision a client would see: a group in which any event
is a re-send or is refused goes to ``append_on``, which decides under the lock.

When another writer appends too (another ``serve`` process, another machine), planning
on the head as the tail knows it would fail nearly every time. The tail then turns
``shared`` (and looks up the streams it knew again: the others may have moved them): each
group is still planned without the lock, on the head and the stream versions as the tail
knows them, but keeps its events' canonical encodings, and is written with
``writes.write_shared``, which moves it onto the head PostgreSQL finds, and its streams
past the versions the others wrote meanwhile (one round trip, whatever they wrote). It
reports the streams the others wrote to, so that what the tail knows stays what is
stored as of its head. One group is on its way at a time then: a group planned on
another still on its way could name that one's events by positions that move. An event
with an expected version goes under the lock, where the version it expects is checked.
After ``QUIET_GROUPS`` groups in a row that went in as planned, the others seem to have
stopped, and the tail plans ahead again (a writer that comes back moves the head, and
the group planned on it goes under the lock, as the first time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from app.errors import AppError
from app.store.append.planning import GroupPlan, Head, Key, ModelKey, StoredFacts
from app.store.append.writes import MovedGroup
from app.store.model_registry import Registration
from app.store.records import Appended, NewEvent

Requests = Sequence[tuple[str, Sequence[NewEvent]]]
# Groups in a row that nobody else's moved: the tail plans ahead again. Few: in one
# process, the scheduler's decisions (written under the lock) count as another writer, and
# a writer that comes back costs the one group that meets it under the lock.
QUIET_GROUPS = 8


@dataclass(frozen=True, slots=True)
class Wanted:
    """The facts a group needs that the tail does not know."""

    streams: frozenset[Key]
    causes: frozenset[Key]
    models: frozenset[ModelKey]

    def __bool__(self) -> bool:
        return bool(self.streams or self.causes or self.models)


@dataclass(frozen=True, slots=True)
class Planned:
    """A group planned on the tail: write ``group`` on the head ``after``; on success,
    ``outcomes`` are the requests' answers."""

    after: Head
    group: GroupPlan
    outcomes: list[list[Appended]]
    generation: int  # the tail's, when planned: what it knew then still holds if unchanged
    shared: bool = False  # to be moved onto the head it meets (writes.write_shared)


class TailCache:
    def __init__(self, *, capacity: int = 100_000, quiet_groups: int = QUIET_GROUPS) -> None:
        self._capacity = capacity  # of each map; past it they are emptied, not the head
        self._quiet_groups = quiet_groups
        self.head: Head | None = None  # where the next group goes; None: plan under the lock
        self._left: Head | None = None  # where this appender's last written group left it
        self._versions: dict[Key, int] = {}
        self._positions: dict[Key, int] = {}
        self._registrations: dict[ModelKey, Registration] = {}
        self._generation = 0  # counts the times it dropped what it knew
        self.shared = False  # others append too: groups go one at a time, write_shared
        self._quiet = 0  # shared groups in a row that went in as planned

    def wanted(self, requests: Requests) -> Wanted:
        streams = {(t, e.stream) for t, batch in requests for e in batch}
        causes = {(t, c) for t, batch in requests for e in batch for c in e.causes}
        models = {
            (t, e.model_name, e.model_version)
            for t, batch in requests
            for e in batch
            if e.model_name is not None and e.model_version is not None
        }
        ids = {(t, e.id) for t, batch in requests for e in batch}
        # Tested one by one: ``set - dict.keys()`` walks every key of the dict.
        versions, positions, registrations = self._versions, self._positions, self._registrations
        return Wanted(
            frozenset([s for s in streams if s not in versions]),
            frozenset([c for c in causes if c not in positions and c not in ids]),
            frozenset([m for m in models if m not in registrations]),
        )

    def learn(self, facts: StoredFacts) -> None:
        """Facts looked up since the last write: known streams stay as the tail has them
        (a group on its way may have moved them past what the lookup saw). An event past
        the head the tail knows was written by someone else since: the head is no longer
        where it believes (a group planned on it would cite that event by a position it
        means to give one of its own), so the next group goes under the lock."""
        for key, version in facts.versions.items():
            self._versions.setdefault(key, version)
        self._positions.update(facts.positions)
        self._registrations.update(facts.registrations)
        head = self.head
        if head is not None and any(p > head.position for p in facts.positions.values()):
            self.head = None

    def plan(self, requests: Requests) -> Planned | None:
        """``requests`` planned on ``head``, which moves past them; None when the tail
        does not know the head or a stream of theirs, an event reuses an id it knows, or
        a request is refused (then it forgets what the requests before that claimed):
        plan them under the lock. May raise what planning a request raises (data it
        cannot encode, say)."""
        after = self.head
        if after is None:
            return None  # it does not know where the head is
        positions, versions = self._positions, self._versions
        if any((tenant, e.id) in positions for tenant, batch in requests for e in batch):
            return None  # a re-send, or an id taken: decided under the lock
        if any((tenant, e.stream) not in versions for tenant, batch in requests for e in batch):
            return None  # a stream it does not know (dropped since looked up): the same
        if self.shared and any(
            e.expected_version is not None for _, batch in requests for e in batch
        ):
            return None  # the version it expects is checked under the lock
        group = GroupPlan(
            after.position,
            after.hash,
            {},
            self._positions,
            self._versions,
            datetime.now(UTC),
            self._registrations,
            keep_canonical=self.shared,
        )
        outcomes: list[list[Appended]] = []
        for tenant, batch in requests:
            outcome = group.plan(tenant, batch)
            if isinstance(outcome, AppError) or any(a.duplicate for a in outcome):
                self.forget()
                return None
            outcomes.append(outcome)
        self.head = Head(group.position, group.prev_hash)
        return Planned(after, group, outcomes, self._generation, self.shared)

    @property
    def generation(self) -> int:
        """Changes whenever the tail drops what it knew (``forget``, ``trim``, past its
        capacity): facts looked up before may be gone, plans made before may not hold."""
        return self._generation

    def still_holds(self, planned: Planned) -> bool:
        """Whether nothing was forgotten since ``planned`` was planned: every group it
        rests on is written, or on its way."""
        return planned.generation == self._generation

    def written(self, planned: Planned, moved: MovedGroup | None = None) -> None:
        """``planned`` is in the log: where it was planned to go, or ``moved`` from there
        (``writes.write_shared``)."""
        group = planned.group
        planned_end = Head(group.position, group.prev_hash)
        if moved is None:
            self._left = planned_end
            if planned.shared:
                self._quiet += 1
                if self._quiet >= self._quiet_groups:
                    self.shared = False  # plan ahead again, several groups on their way
            return
        self._quiet = 0
        if moved.others is None:  # others wrote too much to say which streams moved
            self._versions = {}
            self._generation += 1
        else:
            self._versions.update(moved.others)
        positions, versions = self._positions, self._versions
        for row in group.rows:
            stream = (row.tenant, row.event.stream)
            positions[(row.tenant, row.event.id)] = row.position + moved.shift
            versions[stream] = row.stream_version + moved.versions.get(stream, 0)
        self._left = moved.head
        if self.head == planned_end:  # nothing planned on it since (one group at a time)
            self.head = moved.head

    def restart(self, found: Head | None, group: GroupPlan | None) -> None:
        """``log.append_on`` found the head at ``found`` under the lock and wrote ``group``
        (if it wrote anything). Where the head was not where this appender last left it,
        someone else appends too: what the tail knew of streams is dropped (looked up
        again when needed), and the tail turns shared."""
        if found is None:
            return
        if found != self._left:  # someone else appended since this appender's last group
            # To streams this tail knows, maybe: it looks them up again.
            self.shared = True
            self._quiet = 0
            self._versions = {}
            self._generation += 1
        if group is not None:
            self._versions.update(group.versions)
            self._positions.update(group.positions)
            self._registrations.update(group.registrations)
            found = Head(group.position, group.prev_hash)
        self._left = self.head = found
        if self.is_full():
            self._drop_facts()

    def forget(self) -> None:
        """Drop everything: a group failed or was refused, and what the groups planned
        after it claimed is not so. The next group is planned under the lock."""
        self.head = None
        self._drop_facts()

    def is_full(self) -> bool:
        return len(self._positions) > self._capacity or len(self._versions) > self._capacity

    def trim(self) -> None:
        """Drop the facts but not the head: for when no group is on its way (a group
        planned on facts it dropped would be refused, and planned again)."""
        self._drop_facts()

    def _drop_facts(self) -> None:
        self._generation += 1
        self._versions = {}
        self._positions = {}
        self._registrations = {}
