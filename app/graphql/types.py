"""The GraphQL object types. Names are public API: keep them."""

import base64
import enum
from collections.abc import Callable, Iterable
from datetime import timedelta

import strawberry
from strawberry.scalars import JSON
from strawberry.types.nodes import SelectedField, Selection

from app.errors import BadRequest
from app.graphql.context import CURRENT_BUDGET, Context
from app.graphql.cursors import cursor_shown_at, decode_cursor, encode_cursor
from app.graphql.openlineage import DatasetVersion, LineageRun, TrainingRun
from app.graphql.scalars import BigInt
from app.store.chain import format_recorded_at
from app.store.deployment_reads import Change as StoredChange
from app.store.deployments import DeploymentState
from app.store.graph import Direction, Page
from app.store.lineage import Audit, Trace
from app.store.model_registry_reads import Model as StoredModel
from app.store.model_registry_reads import ModelVersion as StoredVersion
from app.store.records import StoredEvent
from app.store.timestamps import parse_rfc3339


@strawberry.enum
class LineageDirection(enum.Enum):
    UPSTREAM = strawberry.enum_value("upstream", description="its causes, and theirs")
    DOWNSTREAM = strawberry.enum_value("downstream", description="its effects, and theirs")
    BOTH = strawberry.enum_value(
        "both",
        description="its causes upward and its effects downward, each followed its own way "
        "(not a cause's other effects)",
    )

    def to_store(self) -> Direction:
        return Direction(self.value)


@strawberry.type(description="A registered model version (the registry read model).")
class ModelVersion:
    name: str
    version: str
    signature: JSON
    signature_digest: str
    tags: JSON
    enforce_outputs: bool
    registered_at: str
    training_runs: list[str] = strawberry.field(
        description="The runIds of the OpenLineage runs that trained this version."
    )

    @classmethod
    def from_store(cls, found: StoredVersion) -> "ModelVersion":
        return cls(
            training_runs=list(found.training_runs),
            name=found.name,
            version=found.version,
            signature=JSON(found.signature),
            signature_digest=found.signature_digest,
            tags=JSON(found.tags),
            enforce_outputs=found.enforce_outputs,
            registered_at=found.registered_at.isoformat(),
        )


@strawberry.type(description="A registered model: its versions and aliases.")
class Model:
    name: str
    versions: list[ModelVersion]
    aliases: JSON = strawberry.field(description="alias -> version")

    @classmethod
    def from_store(cls, found: StoredModel) -> "Model":
        return cls(
            name=found.name,
            versions=[ModelVersion.from_store(v) for v in found.versions],
            aliases=JSON(found.aliases),
        )


@strawberry.type(description="The model that produced an event, as the event names it.")
class ModelRef:
    name: str
    version: str | None
    signature_digest: str | None

    @strawberry.field(description="The registered version, with its signature.")
    async def registered(self, info: strawberry.Info[Context, None]) -> ModelVersion | None:
        if self.version is None:
            return None
        found = await info.context.loaders.model_versions.load((self.name, self.version))
        return None if found is None else ModelVersion.from_store(found)


@strawberry.type(description="One stored event: its CloudEvents attributes and its lineage.")
class Event:
    # The attributes are copied out when the event is made, not computed by resolvers:
    # a field without a resolver is a plain attribute read, and lists of hundreds of
    # events (an audit, a lineage) complete in one pass (app/graphql/execution.py).
    stored: strawberry.Private[StoredEvent]
    id: strawberry.ID
    source: str
    type: str
    subject: str | None
    time: str | None = strawberry.field(
        description="Event time exactly as the producer sent it (RFC 3339)."
    )
    recorded_time: str = strawberry.field(
        description="When the store recorded the event (RFC 3339, UTC)."
    )
    stream: str
    stream_version: BigInt
    position: BigInt = strawberry.field(description="The event's place in the global order.")
    data_content_type: str | None
    data_schema: str | None
    data: JSON | None = strawberry.field(
        description="JSON data; null for binary data (see dataBase64)."
    )
    correlation_id: str | None
    hash: str = strawberry.field(description="SHA-256 chain hash, hex (docs/hash-chain.md).")

    @classmethod
    def of(cls, stored: StoredEvent) -> "Event":
        record = stored.record
        # The instance's attributes set at once, as the dataclass __init__ would set them
        # one keyword at a time (an answer makes hundreds of these). ID, BigInt and JSON
        # are NewTypes: the values themselves.
        event = object.__new__(cls)
        event.__dict__ = {
            "stored": stored,
            "id": record.id,
            "source": record.source,
            "type": record.type,
            "subject": record.subject,
            "time": record.time,
            "recorded_time": format_recorded_at(record.recorded_at),
            "stream": record.stream,
            "stream_version": record.stream_version,
            "position": record.position,
            "data_content_type": record.datacontenttype,
            "data_schema": record.dataschema,
            "data": record.data if record.data_binary is None else None,
            "correlation_id": record.correlation_id,
            "hash": stored.hash.hex(),
        }
        return event

    @strawberry.field(
        description=(
            "recordedTime - time in seconds, to the microsecond: positive when recorded after "
            "the producer's time, negative when stamped ahead of the server's clock; null "
            "without a time."
        )
    )
    def drift(self) -> float | None:
        record = self.stored.record
        at = None if record.time is None else parse_rfc3339(record.time)[0]
        return None if at is None else (record.recorded_at - at) / timedelta(seconds=1)

    @strawberry.field(description="Binary data, base64-encoded; null for JSON data.")
    def data_base64(self) -> str | None:
        binary = self.stored.record.data_binary
        if binary is None:
            return None
        encoded = base64.b64encode(binary).decode()
        budget = CURRENT_BUDGET.get()
        if budget is not None:  # charged as the JSON values are (app.graphql.scalars)
            budget.spend_json(encoded)
        return encoded

    @strawberry.field(description="The other extension attributes, as sent.")
    def extensions(self) -> JSON:
        return JSON(dict(self.stored.record.extensions))

    @strawberry.field
    def model(self) -> ModelRef | None:
        record = self.stored.record
        if record.model_name is None:
            return None
        return ModelRef(
            name=record.model_name,
            version=record.model_version,
            signature_digest=record.model_signature,
        )

    @strawberry.field(description="The events this one was derived from, in the order named.")
    async def causes(self, info: strawberry.Info[Context, None]) -> list["Event"]:
        content = asks_for_content(info.selected_fields)
        found = await info.context.loaders.causes.load((self.stored.position, content))
        if info.context.budget.spent:
            return []  # the answer is refused whole; see AnswerBudget.spent
        return [Event.of(s) for s in found]

    @strawberry.field(description="The events derived from this one, in position order.")
    async def effects(
        self,
        info: strawberry.Info[Context, None],
        first: int = 20,
        after: str | None = None,
    ) -> "EventConnection":
        size = page_size(first, info.context.limits.max_page_size)
        content = asks_for_content(info.selected_fields)
        page = await info.context.loaders.effects.load(
            (self.stored.position, size, decode_cursor(after), cursor_shown_at(after), content)
        )
        if info.context.budget.spent:
            return EventConnection.from_page(Page([], False))
        return EventConnection.from_page(page, has_previous=page.has_previous)


# The fields of an Event whose values may be large: a page, a cause or a page of effects
# reads them only when the query asks for one, anywhere below it (a fragment's too): 24
# ids of events of 1 MiB held 37 MB.
CONTENT_FIELDS = frozenset({"data", "dataBase64", "extensions"})


def asks_for_content(selections: Iterable[Selection]) -> bool:
    return asks_for(selections, CONTENT_FIELDS)


def asks_for(selections: Iterable[Selection], names: frozenset[str]) -> bool:
    """Whether a field of ``names`` is selected anywhere in ``selections`` (Strawberry's
    ``info.selected_fields``, fragments included; a fragment's own name is none, and a
    selection ``@skip``ped or not ``@include``d is not asked for)."""
    for selected in selections:
        directives = selected.directives
        if (directives.get("skip") or {}).get("if") is True:
            continue
        if (directives.get("include") or {}).get("if") is False:
            continue
        if isinstance(selected, SelectedField) and selected.name in names:
            return True
        if asks_for(selected.selections, names):
            return True
    return False


def made_once() -> Callable[[StoredEvent], Event]:
    """``Event.of`` that makes each event once: an answer names most events several times
    (an audit's derived events and its models' events; a lineage's nodes and edges)."""
    # By identity: an answer's events come from one read, each once. (Each Event made
    # holds its StoredEvent, so no identity is reused while this is.)
    made: dict[int, Event] = {}

    def event(stored: StoredEvent) -> Event:
        found = made.get(id(stored))
        if found is None:
            found = made[id(stored)] = Event.of(stored)
        return found

    return event


def page_size(first: int, cap: int) -> int:
    if first < 0:
        raise BadRequest("first must not be negative", argument="first")
    return min(first, cap)


@strawberry.type
class PageInfo:
    has_next_page: bool
    has_previous_page: bool
    start_cursor: str | None
    end_cursor: str | None


@strawberry.type
class EventEdge:
    cursor: str
    node: Event


@strawberry.type(description="A page of events in position order (Relay connection).")
class EventConnection:
    edges: list[EventEdge]
    page_info: PageInfo

    @classmethod
    def from_page(cls, page: Page, *, has_previous: bool = False) -> "EventConnection":
        shown_at = [e.position for e in page.events[1:]] + [page.next_position]
        edges = [
            EventEdge(cursor=encode_cursor(e.position, shown_at[n]), node=Event.of(e))
            for n, e in enumerate(page.events)
        ]
        return cls(
            edges=edges,
            page_info=PageInfo(
                has_next_page=page.has_next,
                has_previous_page=has_previous,
                start_cursor=edges[0].cursor if edges else None,
                end_cursor=edges[-1].cursor if edges else None,
            ),
        )


@strawberry.type
class LineageNode:
    event: Event
    depth: int = strawberry.field(description="Steps from the root (0 for the root).")


@strawberry.type(description="A direct causal link: effect was derived from cause.")
class LineageEdge:
    cause: Event
    effect: Event


@strawberry.type(description="The causal graph around one event.")
class Lineage:
    root: Event
    nodes: list[LineageNode]
    edges: list[LineageEdge]
    truncated: bool = strawberry.field(
        description="True when maxDepth, limit or a server cap left part of the graph out."
    )

    @classmethod
    def from_trace(cls, answer: Trace) -> "Lineage":
        event = made_once()
        return cls(
            root=event(answer.root),
            nodes=[LineageNode(event=event(n.event), depth=n.depth) for n in answer.nodes],
            edges=[LineageEdge(cause=event(c), effect=event(e)) for c, e in answer.edges()],
            truncated=answer.truncated,
        )


@strawberry.type(description="A model found in a decision's lineage, with what it produced.")
class AuditModel:
    name: str
    version: str | None
    signature_digest: str | None
    events: list[Event]


@strawberry.type(description="Which sources, derived events and models led to a decision.")
class DecisionAudit:
    decision: Event
    source_events: list[Event]
    derived_events: list[Event]
    models: list[AuditModel]
    trace: strawberry.Private[Trace]
    chain_verified: bool = strawberry.field(
        description=(
            "Every event in this answer matches its hash, and the chain after it names that"
            " hash: the next event in the log links to it, or the log head holds it. This"
            " covers the walk from the training runs (trainingEvents) too."
        )
    )
    truncated: bool
    training_runs: list[TrainingRun] = strawberry.field(
        description="The OpenLineage runs that trained the models used, with their events."
    )
    datasets: list[DatasetVersion] = strawberry.field(
        description="The dataset versions upstream of those runs: the training data."
    )
    training_events: list[Event] = strawberry.field(
        description=(
            "Every event the walk upstream from those runs reached, by position: the runs'"
            " own, the dataset versions, and the runs upstream that wrote them."
        )
    )

    @strawberry.field
    def graph(self) -> Lineage:
        # Built when asked for: its nodes and edges are most of the answer's objects.
        return Lineage.from_trace(self.trace)

    @classmethod
    def from_audit(cls, answer: Audit) -> "DecisionAudit":
        event = made_once()
        return cls(
            decision=event(answer.decision),
            source_events=[event(e) for e in answer.sources],
            derived_events=[event(e) for e in answer.derived],
            models=[
                AuditModel(
                    name=m.name,
                    version=m.version,
                    signature_digest=m.signature_digest,
                    events=[event(e) for e in m.events],
                )
                for m in answer.models
            ],
            trace=answer.trace,
            chain_verified=answer.chain_verified,
            truncated=answer.truncated,
            training_runs=[
                TrainingRun(
                    model_name=t.link.model_name,
                    model_version=t.link.model_version,
                    run=LineageRun.build(t.link.run_id, t.events, event),
                )
                for t in answer.training_runs
            ],
            datasets=[DatasetVersion.build(e, event) for e in answer.datasets],
            training_events=[event(e) for e in answer.training_events],
        )


@strawberry.input(description="Every field narrows the result; all are optional.")
class EventFilter:
    types: list[str] | None = None
    source: str | None = None
    stream: str | None = None
    correlation_id: str | None = None
    model_name: str | None = strawberry.field(
        default=None,
        description="Events this model produced (the store's own events that name it, its "
        "registration or rollouts, only when types names them).",
    )
    model_version: str | None = None
    time_from: str | None = strawberry.field(
        default=None, description="Events whose time is at or after this (RFC 3339)."
    )
    time_to: str | None = strawberry.field(
        default=None,
        description="Events whose time is before this (RFC 3339): the end is left out.",
    )
    position_from: BigInt | None = strawberry.field(
        default=None, description="Events at this position or later."
    )
    position_to: BigInt | None = strawberry.field(
        default=None, description="Events at this position or earlier."
    )


@strawberry.type(description="One change to a deployment, and the state right after it.")
class DeploymentChange:
    position: BigInt
    at: str
    action: str
    stable_version: str | None
    candidate_version: str | None
    candidate_percent: int
    reason: str | None
    actor: str | None
    event_id: str


@strawberry.type(description="A service's model deployment: stable, candidate, traffic.")
class Deployment:
    service: str
    model: str | None
    status: str
    stable_version: str | None
    candidate_version: str | None
    candidate_percent: int
    traffic: JSON = strawberry.field(description="version -> percent of requests")
    history: list[DeploymentChange]

    @classmethod
    def build(cls, state: DeploymentState, history: list[StoredChange]) -> "Deployment":
        return cls(
            service=state.service,
            model=state.model,
            status=state.status,
            stable_version=state.stable_version,
            candidate_version=state.candidate_version,
            candidate_percent=state.candidate_percent,
            traffic=JSON(state.traffic()),
            history=[
                DeploymentChange(
                    position=BigInt(c.position),
                    at=c.at.isoformat(),
                    action=c.action,
                    stable_version=c.stable_version,
                    candidate_version=c.candidate_version,
                    candidate_percent=c.candidate_percent,
                    reason=c.reason,
                    actor=c.actor,
                    event_id=c.event_id,
                )
                for c in history
            ],
        )
