"""The per-request context: who asks, the caps, and DataLoaders made for this request.

Each loader batch opens its own short-lived connection: Strawberry resolves sibling
fields concurrently, and one connection cannot serve two queries at once.
"""

from sqlalchemy.ext.asyncio import AsyncEngine
from strawberry.dataloader import DataLoader
from strawberry.fastapi import BaseContext

from app.errors import AnswerTooLarge
from app.graphql.limits import GraphQLLimits
from app.store.graph import GraphReader, Page, StoredEvent
from app.store.keys import Principal
from app.store.registry import ModelVersion, RegistryReader

EffectsKey = tuple[int, int, int]  # (cause position, first, after position)


class AnswerBudget:
    """How many more list items one answer may hold, and events be loaded for it. Every
    cap on one field (a page, a walk's node cap) leaves nesting free: effects of causes
    of effects multiply their page sizes, so one small query could build millions of
    events, holding the process's one event loop all the while."""

    def __init__(self, items: int) -> None:
        self.items = items
        self.left = items

    def spend(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise AnswerTooLarge(
                f"the answer would hold more than {self.items} list items and loaded "
                "events; ask for fewer (a smaller first, fewer nested levels or aliases)",
                max_answer_items=self.items,
            )


class Loaders:
    def __init__(self, engine: AsyncEngine, tenant: str, budget: AnswerBudget) -> None:
        self._engine = engine
        self._tenant = tenant
        self._budget = budget
        self.causes = DataLoader[int, list[StoredEvent]](load_fn=self._load_causes)
        self.effects = DataLoader[EffectsKey, Page](load_fn=self._load_effects)
        self.model_versions = DataLoader[tuple[str, str], ModelVersion | None](
            load_fn=self._load_model_versions
        )

    async def _load_causes(self, positions: list[int]) -> list[list[StoredEvent]]:
        async with self._engine.connect() as conn:
            found = await GraphReader(conn).fetch_causes(
                self._tenant, positions, limit=self._budget.left + 1
            )
        self._budget.spend(sum(map(len, found.values())))
        return [found[p] for p in positions]

    async def _load_effects(self, keys: list[EffectsKey]) -> list[Page]:
        # Siblings almost always ask for the same page; one query per distinct page.
        pages: dict[EffectsKey, Page] = {}
        by_page: dict[tuple[int, int], list[int]] = {}
        for position, first, after in keys:
            by_page.setdefault((first, after), []).append(position)
        async with self._engine.connect() as conn:
            reader = GraphReader(conn)
            for (first, after), positions in by_page.items():
                found = await reader.fetch_effects(
                    self._tenant, positions, first=first, after=after, limit=self._budget.left + 1
                )
                self._budget.spend(sum(len(page.events) for page in found.values()))
                pages.update({(p, first, after): found[p] for p in positions})
        return [pages[k] for k in keys]

    async def _load_model_versions(self, keys: list[tuple[str, str]]) -> list[ModelVersion | None]:
        async with self._engine.connect() as conn:
            found = await RegistryReader(conn).read_versions(self._tenant, keys)
        return [found.get(k) for k in keys]


class Context(BaseContext):
    def __init__(
        self,
        engine: AsyncEngine,
        walks: AsyncEngine,
        principal: Principal,
        limits: GraphQLLimits,
    ) -> None:
        super().__init__()
        self.engine = engine
        self.walks = walks  # its sessions' statement_timeout is the walk's time budget
        self.principal = principal
        self.limits = limits
        self.budget = AnswerBudget(limits.max_answer_items)
        self.loaders = Loaders(engine, principal.tenant, self.budget)

    @property
    def tenant(self) -> str:
        return self.principal.tenant
