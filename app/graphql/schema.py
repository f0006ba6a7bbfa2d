"""The GraphQL schema: ``Query`` and the extensions that cap and mask.

``create_schema(limits)`` builds it for the app; ``schema`` (default caps) is what
``strawberry export-schema app.graphql.schema:schema`` prints into ``schema.graphql``.
"""

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from typing import Annotated, Any, TypeVar

import strawberry
from graphql import GraphQLError, OperationDefinitionNode
from strawberry.extensions import (
    AddValidationRules,
    MaxAliasesLimiter,
    MaxTokensLimiter,
    ParserCache,
    QueryDepthLimiter,
    SchemaExtension,
)
from strawberry.scalars import JSON
from strawberry.schema.config import StrawberryConfig
from strawberry.types import ExecutionContext

from app.db.engine import DriverConnection, Unanswered
from app.errors import BadRequest, Timeout, Unavailable
from app.graphql.budget import bounded_validation
from app.graphql.context import DEPLOYMENTS, REGISTRY, Context
from app.graphql.cursors import cursor_shown_at, decode_cursor
from app.graphql.errors import ProblemErrors, code_document_error, log_if_unexpected
from app.graphql.execution import FlatListExecutionContext
from app.graphql.limits import GraphQLLimits
from app.graphql.openlineage import Dataset, run_ids
from app.graphql.scalars import BIG_INT, JSON_VALUE, BigInt
from app.graphql.traced import TracedOperation, traced_walk
from app.graphql.types import (
    DecisionAudit,
    Deployment,
    Event,
    EventConnection,
    EventFilter,
    Lineage,
    LineageDirection,
    Model,
    asks_for,
    asks_for_content,
    made_once,
    page_size,
)
from app.store.deployment_reads import DeploymentReader, DeploymentView
from app.store.deployments import DeploymentState
from app.store.failures import is_statement_cancelled, is_unavailable
from app.store.graph import GraphReader
from app.store.lineage import Trace, audit, trace
from app.store.model_registry_reads import RegistryReader
from app.store.openlineage import read_dataset, read_run_events
from app.store.records import EventFilter as StoreFilter
from app.store.records import StoredEvent, refuse_empty_filters
from app.store.timestamps import parse_time_parameter
from app.telemetry import metrics, tracing

_DATASET_RUNS = frozenset({"runs"})  # Dataset.runs: the fields that need the runs' events

Info = strawberry.Info[Context, None]
T = TypeVar("T")


def _store_filter(selection: EventFilter | None, after: int) -> StoreFilter:
    if selection is None:
        return StoreFilter(after=after)
    refuse_empty_filters(
        {
            "types": selection.types,
            "stream": selection.stream,
            "source": selection.source,
            "correlationId": selection.correlation_id,
            "modelName": selection.model_name,
            "modelVersion": selection.model_version,
        }
    )
    start = selection.position_from
    lower = after if start is None else max(after, int(start) - 1)
    return StoreFilter(
        after=lower,
        types=tuple(selection.types or ()),
        stream=selection.stream,
        source=selection.source,
        correlation_id=selection.correlation_id,
        model_name=selection.model_name,
        model_version=selection.model_version,
        since=parse_time_parameter("timeFrom", selection.time_from),
        until=parse_time_parameter("timeTo", selection.time_to),
        position_to=selection.position_to,
    )


async def _page(
    info: Info, selection: StoreFilter, first: int, floor: int = 0, after: str | None = None
) -> EventConnection:
    """A page of ``selection`` after the cursor ``after``; ``floor`` is where the filter
    itself starts (its position lower bound without the cursor), so that
    ``hasPreviousPage`` says whether a matching event lies between it and the cursor. It
    is read where the log shows the event the cursor's page announced next."""
    size = page_size(first, info.context.limits.max_page_size)
    content = asks_for_content(info.selected_fields)
    async with await info.context.reading_log_to(cursor_shown_at(after)) as conn:
        reader = GraphReader(conn)
        page = await reader.fetch_page(info.context.tenant, selection, first=size, content=content)
        earlier = False
        if selection.after > floor:
            upto = selection.after
            if selection.position_to is not None:
                upto = min(upto, selection.position_to)
            before = replace(selection, after=floor, position_to=upto)
            found = await reader.fetch_page(info.context.tenant, before, first=0, content=False)
            earlier = found.has_next
    return EventConnection.from_page(page, has_previous=earlier)


_GRACE_S = 0.5


async def _walk(info: Info, run: Callable[[DriverConnection[Any]], Awaitable[T]]) -> T:
    """Run a graph walk on a connection of the walks' pool (``Context.walks``), under the
    request's time budget: past it, a TIMEOUT error. No connection free within the pool's
    wait (or no database) is UNAVAILABLE, which the pool says itself.

    The walk's connection has the budget as its statement timeout, so PostgreSQL stops
    the walk itself, and every walk of a request with several stops on time. The task's
    own timeout, a little later, only bounds what PostgreSQL does not see (reading the
    rows, checking the chain): cancelling a task that waits on psycopg cancels its
    statement too, but a second cancellation while psycopg waits for the first
    (graphql-core cancels sibling fields when one fails) makes psycopg drop the
    connection, possibly before the server heard of it; the pool then replaces it."""
    try:
        return await _walk_once(info, run)
    except Unanswered as exc:  # a replica that froze since the request chose it
        if info.context.fall_back(exc):
            return await _walk_once(info, run)
        raise Unavailable(str(exc)) from exc
    except Exception as exc:
        # A replica gone since the request chose it (its pooled connections broke): the
        # walk again on the primary, where the request's other reads go from now on.
        if is_unavailable(exc) and info.context.fall_back(exc):
            return await _walk_once(info, run)
        raise


async def _walk_once(info: Info, run: Callable[[DriverConnection[Any]], Awaitable[T]]) -> T:
    budget_ms = info.context.limits.timeout_ms
    info.context.budget.check_time()  # no walk starts past the request's budget
    async with info.context.walks.connect(info.context.tenant) as conn:
        info.context.budget.check_time()  # nor after waiting that long for a connection
        try:
            with metrics.walk_timed():
                async with asyncio.timeout(budget_ms / 1000 + _GRACE_S):
                    return await run(conn)
        except Exception as exc:
            # PostgreSQL's statement timeout, or the task's own.
            if not (isinstance(exc, TimeoutError) or is_statement_cancelled(exc)):
                raise
            raise Timeout(
                f"the lineage query took longer than {budget_ms} ms; lower maxDepth or limit",
                timeout_ms=budget_ms,
            ) from exc


@strawberry.type
class Query:
    @strawberry.field(description="One event by id; null when your tenant has none.")
    async def event(self, info: Info, id: strawberry.ID) -> Event | None:
        _refuse_empty_id(id, "id")  # a variable gone missing, not an event not stored
        async with info.context.reading() as conn:
            found = await GraphReader(conn).fetch_by_ids(info.context.tenant, [str(id)])
        stored = found.get(str(id))
        return None if stored is None else Event.of(stored)

    @strawberry.field(description="Events in position order, filtered, a page at a time.")
    async def events(
        self,
        info: Info,
        filter: EventFilter | None = None,
        first: int = 50,
        after: str | None = None,
    ) -> EventConnection:
        start = None if filter is None else filter.position_from
        floor = 0 if start is None else max(0, int(start) - 1)
        return await _page(info, _store_filter(filter, decode_cursor(after)), first, floor, after)

    @strawberry.field(description="The events of one stream, in version order.")
    async def stream(
        self,
        info: Info,
        id: str,
        from_version: int | None = None,
        first: int = 50,
        after: str | None = None,
    ) -> EventConnection:
        if from_version is not None and from_version < 1:  # as GET /streams/{stream} says
            raise BadRequest(f"fromVersion counts from 1, not {from_version}")
        refuse_empty_filters({"id": id})  # a variable gone missing, not a stream
        selection = StoreFilter(after=decode_cursor(after), stream=id, from_version=from_version)
        return await _page(info, selection, first, after=after)

    @strawberry.field(description="The events of one workflow run (correlation id).")
    async def correlation(
        self, info: Info, id: str, first: int = 50, after: str | None = None
    ) -> EventConnection:
        refuse_empty_filters({"id": id})  # a variable gone missing, not a run with no events
        selection = StoreFilter(after=decode_cursor(after), correlation_id=id)
        return await _page(info, selection, first, after=after)

    @strawberry.field(description="Registered models, with versions and aliases.")
    async def models(self, info: Info) -> list[Model]:
        async with await info.context.reading_model(REGISTRY) as conn:
            found = await RegistryReader(conn).read_models(info.context.tenant)
        return [Model.from_store(m) for m in found]

    @strawberry.field(description="One registered model; null when there is none.")
    async def model(self, info: Info, name: str) -> Model | None:
        async with await info.context.reading_model(REGISTRY) as conn:
            found = await RegistryReader(conn).read_models(info.context.tenant, name)
        return Model.from_store(found[0]) if found else None

    @strawberry.field(
        description="An OpenLineage dataset: its versions and the runs that wrote and read them."
    )
    async def dataset(self, info: Info, namespace: str, name: str) -> Dataset | None:
        tenant = info.context.tenant
        # The runs' events only when asked for: a dataset read by thousands of runs is
        # thousands of events, which its name or versions alone do not need.
        runs: dict[str, list[StoredEvent]] = {}
        async with info.context.reading() as conn:
            record = await read_dataset(conn, tenant, namespace, name)
            if record is None:
                return None
            if asks_for(info.selected_fields, _DATASET_RUNS):
                runs = await read_run_events(conn, tenant, run_ids(record))
        info.context.budget.spend(
            len(record.versions) + len(record.static_events) + sum(map(len, runs.values()))
        )
        return Dataset.build(namespace, name, record, runs, made_once())

    @strawberry.field(description="Every service's deployment, now.")
    async def deployments(self, info: Info) -> list[Deployment]:
        async with await info.context.reading_model(DEPLOYMENTS) as conn:
            reader = DeploymentReader(conn)
            found = await reader.read_deployments(info.context.tenant)
            histories = await reader.read_histories(info.context.tenant, found)
        return [Deployment.build(_as_state(v), histories[v.service]) for v in found]

    @strawberry.field(description="One service's deployment, now or as of ``at`` (RFC 3339).")
    async def deployment(
        self, info: Info, service: str, at: str | None = None
    ) -> Deployment | None:
        when = parse_time_parameter("at", at)
        async with await info.context.reading_model(DEPLOYMENTS) as conn:
            history = await DeploymentReader(conn).read_history(
                info.context.tenant,
                service,
                at=when,
            )
        if not history:
            return None
        last = history[-1]
        state = DeploymentState(
            service,
            last.model,
            last.stable_version,
            last.candidate_version,
            last.candidate_percent,
        )
        return Deployment.build(state, history)

    @strawberry.field(description="The causal graph around one event.")
    async def lineage(
        self,
        info: Info,
        id: strawberry.ID,
        direction: LineageDirection = LineageDirection.UPSTREAM,
        max_depth: int = 10,
        types: Annotated[
            list[str] | None,
            strawberry.argument(
                description="Only events of these types in the answer (the root always); "
                "the walk still passes through the others."
            ),
        ] = None,
        limit: Annotated[
            int,
            strawberry.argument(
                description="Events walked at most, the root included, whether or not "
                "`types` keeps them in the answer (the server caps it too); `truncated` "
                "says when it cut the walk short."
            ),
        ] = 1000,
    ) -> Lineage:
        caps = info.context.limits
        depth, nodes = (
            _bound(max_depth, caps.max_lineage_depth, "maxDepth"),
            # The root is always in the answer: a limit of 0 still shows it, truncated.
            max(1, _bound(limit, caps.max_lineage_nodes, "limit")),
        )

        _refuse_empty_id(id, "id")
        refuse_empty_filters({"types": types})
        walking = _walk(
            info,
            lambda conn: trace(
                conn,
                info.context.tenant,
                str(id),
                direction.to_store(),
                max_depth=depth,
                max_nodes=nodes,
                types=tuple(types or ()),
            ),
        )
        answer = await (traced_walk("lineage", walking, depth, _found) if tracing.on else walking)
        info.context.budget.spend(len(answer.nodes))
        metrics.WALK_TRUNCATIONS.labels("lineage").inc(answer.truncated)
        return Lineage.from_trace(answer)

    @strawberry.field(description="Which sources, derived events and models led to a decision.")
    async def audit(
        self, info: Info, decision_id: strawberry.ID, max_depth: int = 50
    ) -> DecisionAudit:
        caps = info.context.limits
        depth = _bound(max_depth, caps.max_lineage_depth, "maxDepth")
        _refuse_empty_id(decision_id, "decisionId")
        auditing = _walk(
            info,
            lambda conn: audit(
                conn,
                info.context.tenant,
                str(decision_id),
                max_depth=depth,
                max_nodes=caps.max_lineage_nodes,
            ),
        )
        answer = await (
            # Truncated as the answer says: the decision's walk, or a training run's.
            traced_walk("audit", auditing, depth, lambda a: (*_found(a.trace)[:2], a.truncated))
            if tracing.on
            else auditing
        )
        # Every event the walks read: the training runs' events and the dataset versions
        # are among the training walk's.
        info.context.budget.spend(len(answer.trace.nodes) + len(answer.training_events))
        metrics.WALK_TRUNCATIONS.labels("audit").inc(answer.truncated)
        return DecisionAudit.from_audit(answer)


def _as_state(view: DeploymentView) -> DeploymentState:
    return DeploymentState(
        view.service,
        view.model,
        view.stable_version,
        view.candidate_version,
        view.candidate_percent,
    )


def _found(answer: Trace) -> tuple[int, int, bool]:
    """A walk's nodes, the depth it reached and whether it was truncated (its span's)."""
    return len(answer.nodes), answer.nodes[-1].depth if answer.nodes else 0, answer.truncated


def _bound(value: int, cap: int, argument: str) -> int:
    if value < 0:
        raise BadRequest(f"{argument} must not be negative", argument=argument)
    return min(value, cap)


class OperationChosen(SchemaExtension):
    """A document of several operations needs ``operationName``. Strawberry would run the
    first one (it names it for graphql-core), where the GraphQL spec's GetOperation
    refuses: a client that forgot the name would get an answer to another question.

    It runs before validation, after ``bounded_validation`` (which sets the validation
    errors): a request error here ends the request as a validation error does."""

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        document = context.graphql_document
        if document is not None and context._provided_operation_name is None:
            operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
            if len(operations) > 1:
                refusal = GraphQLError(
                    "this document has several operations: send 'operationName' to choose one",
                    operations[1],
                    extensions={"code": "BAD_REQUEST"},
                )
                context.pre_execution_errors = [*(context.pre_execution_errors or []), refusal]
        yield


class _Schema(strawberry.Schema):
    def process_errors(
        self,
        errors: list[GraphQLError],
        execution_context: ExecutionContext | None = None,  # noqa: ARG002  (Strawberry's)
    ) -> None:
        # Strawberry's own logs every error at ERROR with its traceback: a client's
        # NOT_FOUND, and for a value PostgreSQL refused, the SQL with its parameters.
        # Those are the client's, answered as such; only the others are logged.
        for error in errors:
            code_document_error(error)
            log_if_unexpected(error)


def create_schema(limits: GraphQLLimits) -> strawberry.Schema:
    # The limiters' validation rules are classes made when a limiter is made: made once
    # here, so the validation cache (keyed by document and rules) hits across requests.
    rules = [
        *QueryDepthLimiter(max_depth=limits.max_query_depth).validation_rules,
        *MaxAliasesLimiter(max_alias_count=limits.max_aliases).validation_rules,
    ]
    return _Schema(
        query=Query,
        config=StrawberryConfig(scalar_map={BigInt: BIG_INT, JSON: JSON_VALUE}),
        execution_context_class=FlatListExecutionContext,
        extensions=[
            # Parsing and validating (with the limiters' rules) cost more than a small
            # audit itself; clients repeat the same documents, so both are cached.
            lambda: ParserCache(maxsize=256),
            # The validation cache, behind the caps on the expanded document: a document
            # over them is refused before any rule runs (app.graphql.budget).
            bounded_validation(limits, cache_size=256),
            OperationChosen,
            TracedOperation,  # a span per operation, while tracing is on
            lambda: AddValidationRules(rules),
            lambda: MaxTokensLimiter(max_token_count=limits.max_tokens),
            ProblemErrors,
        ],
    )


schema = create_schema(GraphQLLimits())


def _refuse_empty_id(value: str, argument: str) -> None:
    """No stored event has an empty id (ingest refuses it; ``GET /events/`` is a 422)."""
    if not value:
        raise BadRequest(f"{argument} cannot be empty", argument=argument)
