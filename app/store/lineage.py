"""Lineage answers built on the graph: a bounded trace around one event, and the
auditor's view of a decision (its sources, derived events, models, and whether the hash
chain holds for every event in the answer).

An event in an answer is verified when its stored hash matches its content and
``prev_hash``, and the chain after it names that hash: the event at the next position
stores it as its ``prev_hash``, or the log head holds it. The second half is what
catches a forger who rewrote an event and recomputed its hash (the event then matches
itself, and its link to its predecessor never changed). A forger who also edits the
next event's ``prev_hash`` breaks that event's own hash, which an answer that does not
hold it never checks: only the whole chain shows that, and ``causeway verify`` walks it
(with ``--anchor``, up to a head kept outside the database). docs/hash-chain.md says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from psycopg import AsyncConnection as PsycopgConnection

from app.errors import NotFound
from app.store.chain import GENESIS_HASH
from app.store.graph import Direction, WalkedNode, walk, walk_from
from app.store.openlineage import DATASET_VERSION, run_stream
from app.store.records import StoredEvent
from app.store.training_reads import TrainingLink, fetch_training_links


@dataclass(frozen=True, slots=True)
class Trace:
    root: StoredEvent
    nodes: list[WalkedNode]  # by depth, then position; the root first
    truncated: bool

    def edges(self) -> list[tuple[StoredEvent, StoredEvent]]:
        """(cause, effect), both among the nodes: every edge between two of them is in the
        effect's list of causes. Worked out anew at each call: a lineage asks once, an
        audit only for its ``graph``."""
        by_id = {n.event.record.id: n.event for n in self.nodes}
        return [
            (by_id[cause], n.event)
            for n in self.nodes
            for cause in n.event.record.causes
            if cause in by_id
        ]


@dataclass(frozen=True, slots=True)
class ModelUse:
    name: str
    version: str | None
    signature_digest: str | None
    events: list[StoredEvent]


@dataclass(frozen=True, slots=True)
class TrainingRun:
    """An OpenLineage run that trained a model version of the audit, with its events."""

    link: TrainingLink
    events: list[StoredEvent]  # the run's events the walk reached, by position


@dataclass(frozen=True, slots=True)
class Audit:
    decision: StoredEvent
    sources: list[StoredEvent]  # ancestors with no causes at all
    derived: list[StoredEvent]  # ancestors that have causes
    models: list[ModelUse]
    trace: Trace
    chain_verified: bool
    truncated: bool
    training_runs: list[TrainingRun]
    datasets: list[StoredEvent]  # dataset versions upstream of the training runs
    # Every event the walk from the training runs reached, by position: their own, the
    # dataset versions, the runs upstream that wrote them. chain_verified covers these.
    training_events: list[StoredEvent]


async def trace(
    conn: PsycopgConnection[Any],
    tenant: str,
    event_id: str,
    direction: Direction,
    *,
    max_depth: int,
    max_nodes: int,
    types: Sequence[str] = (),
) -> Trace:
    """The events within ``max_depth`` steps of ``event_id`` (``max_nodes`` at most).
    With ``types``, only events of those types are returned (the root always is); the walk
    still passes through the others."""
    walked = await walk(conn, tenant, event_id, direction, max_depth=max_depth, max_nodes=max_nodes)
    if walked is None:
        raise NotFound(f"no event with id {event_id!r}", id=event_id)
    root = walked.nodes[0].event
    kept = walked.nodes
    if types:
        kept = [n for n in kept if n.event is root or n.event.record.type in types]
    return Trace(root, kept, walked.truncated)


async def audit(
    conn: PsycopgConnection[Any], tenant: str, decision_id: str, *, max_depth: int, max_nodes: int
) -> Audit:
    answer = await trace(
        conn, tenant, decision_id, Direction.UPSTREAM, max_depth=max_depth, max_nodes=max_nodes
    )
    ancestors = [n.event for n in answer.nodes if n.depth > 0]
    models: dict[tuple[str, str | None], ModelUse] = {}
    for node in answer.nodes:
        record = node.event.record
        if record.model_name is None:
            continue
        key = (record.model_name, record.model_version)
        use = models.setdefault(
            key, ModelUse(record.model_name, record.model_version, record.model_signature, [])
        )
        if use.signature_digest is None and record.model_signature is not None:
            # The first event of the version may not name its signature; a later one does.
            use = models[key] = replace(use, signature_digest=record.model_signature)
        use.events.append(node.event)
    links = await fetch_training_links(conn, tenant, models)
    # One walk from every training run's last event: runs that read the same data (a
    # feature set built from thousands of tables) reach it once, not once per run.
    roots = [link.last_event_id for link in links if link.last_event_id is not None]
    training = None
    if roots:
        training = await walk_from(
            conn, tenant, roots, Direction.UPSTREAM, max_depth=max_depth, max_nodes=max_nodes
        )
    upstream = [] if training is None else training.nodes
    reached = sorted((n.event for n in upstream), key=lambda e: e.position)
    by_stream: dict[str, list[StoredEvent]] = {}
    for event in reached:
        by_stream.setdefault(event.record.stream, []).append(event)
    return Audit(
        decision=answer.root,
        sources=[e for e in ancestors if not e.record.causes],
        derived=[e for e in ancestors if e.record.causes],
        models=sorted(models.values(), key=lambda m: (m.name, m.version or "")),
        trace=answer,
        chain_verified=_is_verified(answer.nodes, answer.truncated, {answer.root.record.id})
        and (training is None or _is_verified(training.nodes, training.truncated, set(roots))),
        truncated=answer.truncated or (training is not None and training.truncated),
        training_runs=[
            TrainingRun(link, by_stream.get(run_stream(link.run_id), [])) for link in links
        ],
        datasets=[e for e in reached if e.record.type == DATASET_VERSION],
        training_events=reached,
    )


def _is_verified(nodes: Sequence[WalkedNode], truncated: bool, roots: set[str]) -> bool:
    return all(_is_sealed(n) for n in nodes) and _walk_follows_causes(nodes, truncated, roots)


def _walk_follows_causes(nodes: Sequence[WalkedNode], truncated: bool, roots: set[str]) -> bool:
    """Whether the upstream walk reached what the events' hashed causes name, and only
    that. The walk follows ``event_causes``, which the chain does not cover: a forged
    edge brings in an event no event in the answer names, and a deleted one leaves out a
    cause one names. Nodes at the walk's last two levels may have causes the cut left
    out (by depth or by the node cap), so only the levels before are held to all of
    theirs, unless nothing was cut. ``roots``: the ids the walk started from, which a
    node may name too (one training run's data written by another)."""
    records = [n.event.record for n in nodes]
    walked = {r.id for r in records}
    named: set[str] = set().union(*[r.causes for r in records])
    if not truncated:
        return named == walked - (roots - named)
    if not walked - roots <= named:
        return False
    last = nodes[-1].depth  # nodes come by depth
    return all(walked.issuperset(n.event.record.causes) for n in nodes if n.depth + 1 < last)


def _is_sealed(node: WalkedNode) -> bool:
    """The event matches its hash, and the chain after it names that hash."""
    event = node.event
    if event.position == 1 and event.prev_hash != GENESIS_HASH:
        return False
    return node.sealed_by == event.hash and event.is_chained()
