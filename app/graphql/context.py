"""The per-request context: who asks, the caps, and DataLoaders made for this request.

Each loader batch opens its own short-lived connection: Strawberry resolves sibling
fields concurrently, and one connection cannot serve two queries at once.
"""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import orjson
from strawberry.dataloader import DataLoader
from strawberry.fastapi import BaseContext

from app.db.engine import Connection, Connector
from app.db.tenancy import scope_session
from app.errors import AnswerTooLarge, AppError, Timeout, Unavailable
from app.graphql.limits import GraphQLLimits
from app.projections.deployments import Deployments
from app.projections.model_registry import ModelRegistry
from app.projections.runner import ProjectionRunner
from app.store.failures import is_pool_exhausted, is_statement_cancelled
from app.store.graph import GraphReader, Page
from app.store.keys import Principal
from app.store.model_registry_reads import ModelVersion, RegistryReader
from app.store.records import StoredEvent
from app.web.reads import ReadRouter, ReadSource

# (effect position, whether data, binary data and extensions are read)
CausesKey = tuple[int, bool]
# (cause position, first, after position, the position its cursor announced, content)
EffectsKey = tuple[int, int, int, int | None, bool]
# What an item counts against the answer budget, where an item of a plain list counts
# one: about what each costs more. graphql-core completing an item field by field with
# synchronous resolvers (extensions, model) costs a few plain items; an item under which
# a field awaits a resolver of its own (causes, effects: a coroutine and a loader's
# future each) ten to thirty.
SYNC_ITEM_COST = 2
REGISTRY = ModelRegistry.name  # the read models GraphQL reads
DEPLOYMENTS = Deployments.name
GENERIC_ITEM_COST = 10


class AnswerBudget:
    """How many more list items one answer may hold, and events be loaded for it. Every
    cap on one field (a page, a walk's node cap) leaves nesting free: effects of causes
    of effects multiply their page sizes, so one small query could build millions of
    events, holding the process's one event loop all the while.

    Items are counted by what they cost: an item of a plain list (completed in one pass,
    ``execution.FlatListExecutionContext``) counts one, an item that graphql-core
    completes field by field counts ``SYNC_ITEM_COST``, and ``GENERIC_ITEM_COST`` when a
    field under it awaits a resolver of its own. Counting all as one let four levels of
    60 causes each complete 100,000 resolver-backed items before the budget ran out: 7 s
    of the event loop, stalls of 3 s for every other request. Counted by cost, 0.5 s.

    And how long the request may go on starting work: each walk stops within the time
    budget (its connection's statement timeout), but a request of many walks, or of many
    pages of effects (aliases with other cursors: one query each, one after another),
    once ran 11 to 31 s. Past ``timeout_ms`` from its start, no further walk or load
    starts, and the request answers TIMEOUT."""

    def __init__(self, items: int, timeout_ms: int, max_bytes: int) -> None:
        self.items = items
        self.left = items
        self.timeout_ms = timeout_ms
        self._deadline = time.monotonic() + timeout_ms / 1000
        self.refusal: AppError | None = None  # what ProblemErrors answers, alone
        self.max_bytes = max_bytes
        self.bytes_left = max_bytes
        self._sizes: dict[int, int] = {}  # by id: one event's data, in every place it shows

    def spend_json(self, value: object) -> None:
        """Charge a JSON value of the answer (``app.graphql.scalars.JSON_VALUE``, and
        ``Event.dataBase64``) by its encoded size each time it shows, measured once (an
        event's data is the same object in every place the event is)."""
        size = self._sizes.get(id(value))
        if size is None:
            try:
                size = len(orjson.dumps(value))
            except (TypeError, orjson.JSONEncodeError):  # nested past orjson: rare, forged
                size = 0
            self._sizes[id(value)] = size
        self.bytes_left -= size
        if self.bytes_left < 0:
            refusal = AnswerTooLarge(
                f"the answer would hold more than {self.max_bytes} bytes of JSON values "
                "(events' data and extensions); ask for fewer (a smaller first, fewer "
                "nested levels or aliases, or leave out data)",
                max_answer_bytes=self.max_bytes,
            )
            self.refusal = self.refusal or refusal
            raise refusal

    @property
    def spent(self) -> bool:
        """Whether the answer is refused already. Loads then load nothing, and the fields
        already started get empty lists, cheap to complete, where a refusal of each cost
        graphql-core an error per field. Whatever they answer, the request answers
        ``refusal``."""
        return self.refusal is not None

    def spend(self, count: int) -> None:
        if count <= 0:
            return
        self.left -= count
        if self.left < 0:
            # A new one each time: one raised again and again grows its traceback.
            refusal = AnswerTooLarge(
                f"the answer would hold more than {self.items} list items and loaded "
                f"events (an item with fields that load more counts {GENERIC_ITEM_COST}); "
                "ask for fewer (a smaller first, fewer nested levels or aliases)",
                max_answer_items=self.items,
            )
            self.refusal = self.refusal or refusal
            raise refusal

    def check_time(self) -> None:
        """Raise TIMEOUT once the request is past its time budget (see above)."""
        if time.monotonic() > self._deadline:
            raise self.timed_out()

    def timed_out(self) -> Timeout:
        """The TIMEOUT refusal, recorded as the request's answer."""
        refusal = Timeout(
            f"the request took longer than {self.timeout_ms} ms; ask for less (fewer walks, "
            "aliases or nested pages, a lower maxDepth or limit)",
            timeout_ms=self.timeout_ms,
        )
        self.refusal = self.refusal or refusal
        return refusal


# The answer budget of the request being executed: a JSON value's scalar charges it
# (``app.graphql.scalars.JSON_VALUE``), where no resolver is called (plain attributes
# complete in one pass).
CURRENT_BUDGET: ContextVar[AnswerBudget | None] = ContextVar("answer_budget", default=None)


@asynccontextmanager
async def reading(
    engine: Connector, budget: AnswerBudget, tenant: str
) -> AsyncIterator[Connection]:
    """A connection for reads of the request that are not walks (events, pages of causes
    and effects, models). ``engine``'s sessions have the time budget as their statement
    timeout (``app.main``), so PostgreSQL stops each read past it, as it stops a walk; on
    the main pool's 30 s, a page of effects on a dense graph once took 8 s. A read that is
    stopped answers TIMEOUT, and no read starts past the budget. Its session reads as
    ``tenant`` (the service role: ``app.db.tenancy``)."""
    budget.check_time()
    async with contextlib.AsyncExitStack() as stack:
        try:
            conn = await stack.enter_async_context(engine.connect())
        except Exception as exc:
            if is_pool_exhausted(exc):  # none came free: as a walk answers when its pool has none
                raise Unavailable("no database connection came free for this GraphQL read") from exc
            raise
        try:
            budget.check_time()  # nor after waiting that long for a connection
            await scope_session(conn, tenant)
            yield conn
        except Exception as exc:
            if is_statement_cancelled(exc):
                raise budget.timed_out() from exc
            raise


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SharedLoader(DataLoader[K, V]):
    """A DataLoader whose loads its callers await shielded. Every field that asks for one
    key awaits one future; a field that is cancelled (a sibling failed, and graphql-core
    cancels the others) would cancel that future for all of them, and they would end with
    a CancelledError, which no GraphQL error handling catches: a plain-text 500."""

    def __init__(self, load_fn: Callable[[list[K]], Awaitable[Sequence[V]]]) -> None:
        super().__init__(load_fn=load_fn)
        self._watched: set[int] = set()

    def load(self, key: K) -> Awaitable[V]:
        loading = super().load(key)
        if isinstance(loading, asyncio.Future) and id(loading) not in self._watched:
            # A shield whose caller was cancelled stops listening to what it shields, and
            # asyncio would log the failure of a load that every caller left.
            self._watched.add(id(loading))
            loading.add_done_callback(_retrieved)
        return asyncio.shield(loading)


def _retrieved(future: "asyncio.Future[Any]") -> None:
    if not future.cancelled():
        future.exception()


ReadModelReading = Callable[[str], Awaitable[AbstractAsyncContextManager[Connection]]]
LogReading = Callable[[int | None], Awaitable[AbstractAsyncContextManager[Connection]]]


class Loaders:
    def __init__(
        self,
        engine: Connector,
        tenant: str,
        budget: AnswerBudget,
        reading_model: ReadModelReading,
        reading_log_to: LogReading,
    ) -> None:
        self._engine = engine
        self._reading_model = reading_model
        self._reading_log_to = reading_log_to
        self._tenant = tenant
        self._budget = budget
        self.causes = SharedLoader[CausesKey, list[StoredEvent]](load_fn=self._load_causes)
        self.effects = SharedLoader[EffectsKey, Page](load_fn=self._load_effects)
        self.model_versions = SharedLoader[tuple[str, str], ModelVersion | None](
            load_fn=self._load_model_versions
        )

    async def _load_causes(self, keys: list[CausesKey]) -> list[list[StoredEvent]]:
        if self._budget.spent:
            return [[] for _ in keys]
        found: dict[CausesKey, list[StoredEvent]] = {}
        async with reading(self._engine, self._budget, self._tenant) as conn:
            for content in sorted({content for _, content in keys}):
                positions = [p for p, c in keys if c == content]
                causes = await GraphReader(conn).fetch_causes(
                    self._tenant, positions, limit=max(self._budget.left, 0) + 1, content=content
                )
                self._budget.spend(sum(map(len, causes.values())))
                found.update({(p, content): causes[p] for p in positions})
        return [found[k] for k in keys]

    async def _load_effects(self, keys: list[EffectsKey]) -> list[Page]:
        # Siblings almost always ask for the same page; one query per distinct page, on a
        # connection where the log shows the effect its cursor announced next (as a
        # top-level page after a cursor: Context.reading_log_to).
        if self._budget.spent:
            return [Page([], False) for _ in keys]
        by_read: dict[int | None, dict[tuple[int, int, bool], list[int]]] = {}
        for position, first, after, shown_at, content in keys:
            by_page = by_read.setdefault(shown_at, {})
            by_page.setdefault((first, after, content), []).append(position)
        pages: dict[EffectsKey, Page] = {}
        for shown_at, by_page in by_read.items():
            async with await self._reading_log_to(shown_at) as conn:
                reader = GraphReader(conn)
                for (first, after, content), positions in by_page.items():
                    found = await self._effects_pages(reader, positions, first, after, content)
                    pages.update(
                        {(p, first, after, shown_at, content): found[p] for p in positions}
                    )
        return [pages[k] for k in keys]

    async def _effects_pages(
        self, reader: GraphReader, positions: list[int], first: int, after: int, content: bool
    ) -> dict[int, Page]:
        """Each cause's page of ``first`` effects after ``after``, with the position of
        the effect past it (``Page.next_position``, which its end cursor names)."""
        self._budget.check_time()
        found = await reader.fetch_effects(
            self._tenant,
            positions,
            first=first,
            after=after,
            limit=max(self._budget.left, 0) + 1,
            content=content,
        )
        # Every row read counts, each page's look-ahead row too: a page the row limit cut
        # then spends past the budget and is refused, never answered short with
        # hasNextPage false.
        self._budget.spend(sum(len(p.events) + p.has_next for p in found.values()))
        return found

    async def _load_model_versions(self, keys: list[tuple[str, str]]) -> list[ModelVersion | None]:
        async with await self._reading_model(REGISTRY) as conn:
            found = await RegistryReader(conn).read_versions(self._tenant, keys)
        return [found.get(k) for k in keys]


class Context(BaseContext):
    """``source``: where the request reads the log (``app.web.reads``); ``min_position``:
    the position it named, which its reads of read models must show too."""

    def __init__(
        self,
        source: ReadSource,
        principal: Principal,
        limits: GraphQLLimits,
        *,
        reads: ReadRouter,
        projections: ProjectionRunner,
        min_position: int | None = None,
    ) -> None:
        super().__init__()
        self._source = source
        self.engine = source.graphql
        self.walks = source.walks  # its sessions' statement_timeout is the walk's time budget
        self.principal = principal
        self.limits = limits
        self.min_position = min_position
        self._reads = reads
        self._projections = projections
        self.budget = AnswerBudget(
            limits.max_answer_items, limits.timeout_ms, limits.max_answer_bytes
        )
        CURRENT_BUDGET.set(self.budget)  # for the JSON values the answer completes
        self.loaders = self._loaders()

    def reading(self) -> AbstractAsyncContextManager[Connection]:
        """A connection for one of the request's reads, within its time budget."""
        return reading(self.engine, self.budget, self.tenant)

    async def reading_log_to(self, position: int | None) -> AbstractAsyncContextManager[Connection]:
        """A connection for a read of the log that must show ``position`` (the event a
        page announced next, which its cursor names): the request's source when it may,
        else one that does (``ReadRouter.for_log``: a replica that reaches it in time, else
        the primary). A replica behind the one that read the page answered an empty one:
        the pages seemed to end short of what they announced."""
        source = self._source
        if position is None or source.is_primary or source.head >= position:
            return self.reading()
        found = await self._reads.for_log(position)
        return reading(found.graphql, self.budget, self.tenant)

    def fall_back(self, exc: BaseException) -> bool:
        """After a read on a replica failed for want of its database: the replica is
        marked down, and the request reads the primary from now on. False when the
        request reads the primary already (nothing to fall back to)."""
        if self._source.is_primary:
            return False
        self._reads.mark_down(self._source, exc)
        self._source = self._reads.primary
        self.engine = self._source.graphql
        self.walks = self._source.walks
        self.loaders = self._loaders()
        return True

    def _loaders(self) -> Loaders:
        """The request's DataLoaders, reading where the request now reads."""
        return Loaders(
            self.engine, self.tenant, self.budget, self.reading_model, self.reading_log_to
        )

    async def reading_model(self, projection: str) -> AbstractAsyncContextManager[Connection]:
        """A connection for a read of ``projection``'s read model: where it shows the
        request's ``min_position`` (``Unavailable`` when none does within the wait)."""
        if self.min_position is None:
            return self.reading()
        source = await self._reads.for_read_model(
            self._projections.projection(projection), self.min_position
        )
        return reading(source.graphql, self.budget, self.tenant)

    @property
    def tenant(self) -> str:
        return self.principal.tenant
