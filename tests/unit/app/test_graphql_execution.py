"""The flat-list executor answers exactly what graphql-core answers, errors included."""

from __future__ import annotations

import asyncio
import enum
from typing import Any

import pytest
import strawberry
from strawberry.dataloader import DataLoader
from strawberry.extensions import ParserCache, SchemaExtension
from strawberry.permission import BasePermission
from strawberry.schema.config import StrawberryConfig

from app.graphql.execution import FlatListExecutionContext


@strawberry.enum
class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@strawberry.type
class Leaf:
    name: str
    count: int | None
    colour: Colour


class OnlyEven(BasePermission):
    message = "odd item"

    async def has_permission(self, source: Any, info: Any, **kwargs: Any) -> bool:
        return bool(source.size % 2 == 0)


async def _names(keys: list[int]) -> list[str]:
    return [f"name-{k}" for k in keys]


@strawberry.type
class Item:
    id: strawberry.ID
    size: int
    note: str | None
    leaf: Leaf | None
    leaves: list[Leaf]
    tags: list[str | None]
    secret: str | None = strawberry.field(default="s", permission_classes=[OnlyEven])

    @strawberry.field
    def shout(self) -> str:
        return self.id.upper()

    @strawberry.field
    def times(self, n: int) -> int:
        return self.size * n


def _items() -> list[Item]:
    return [
        Item(
            id=strawberry.ID(f"i{n}"),
            size=n,
            note=None if n % 2 else f"note {n}",
            leaf=None if n == 2 else Leaf(name=f"l{n}", count=n or None, colour=Colour.RED),
            leaves=[Leaf(name=f"m{k}", count=k, colour=Colour.BLUE) for k in range(n)],
            tags=["a", None],
        )
        for n in range(4)
    ]


def _broken(field: str, value: Any) -> list[Item]:
    items = _items()
    object.__setattr__(items[1], field, value)
    return items


@strawberry.type
class Query:
    @strawberry.field
    async def items(self) -> list[Item]:
        return _items()

    @strawberry.field
    def null_id(self) -> list[Item]:
        return _broken("id", None)  # a null in a non-null field

    @strawberry.field
    def bad_size(self) -> list[Item]:
        return _broken("size", "not a number")  # a value the scalar refuses

    @strawberry.field
    def missing(self) -> list[Item]:
        items = _items()
        del items[3].__dict__["note"]  # an attribute that is not there
        return items

    @strawberry.field
    def raising(self) -> list[Item]:
        return _broken("note", ValueError("an error as a value"))

    @strawberry.field
    def names(self) -> list[str]:
        loader = DataLoader(load_fn=_names)
        return [loader.load(k) for k in (1, 2)]  # type: ignore[misc]  # futures, awaited

    @strawberry.field
    def optional_items(self) -> list[Item | None] | None:
        return [None, *_items()]

    @strawberry.field
    def numbered_notes(self) -> list[Item]:
        return _broken("note", 7)  # a String field holding an int: coerced, not skipped


class Shouting(SchemaExtension):
    """A resolve hook: every field goes through it, so no list may skip the resolvers."""

    def resolve(self, _next: Any, root: Any, info: Any, *args: Any, **kwargs: Any) -> Any:
        result = _next(root, info, *args, **kwargs)
        return result.upper() if isinstance(result, str) else result


plain = strawberry.Schema(query=Query)
flat = strawberry.Schema(query=Query, execution_context_class=FlatListExecutionContext)

QUERIES = [
    "{ items { id size note } }",
    "{ items { __typename id x: size y: size } }",
    "{ items { leaf { name count colour __typename } leaves { name colour } tags } }",
    "{ items { ...F } } fragment F on Item { id leaf { ... on Leaf { name } } }",
    "query ($on: Boolean!) { items { id note @include(if: $on) size @skip(if: $on) } }",
    "{ items { id shout } }",
    "{ items { id times(n: 3) } }",
    "{ nullId { id size } }",
    "{ nullId { size } }",
    "{ badSize { id size } }",
    "{ missing { id note } }",
    "{ optionalItems { id leaf { name } } }",
    "{ raising { id note } }",
    "{ numberedNotes { id note } }",
    "{ items { id secret } }",
    "{ names }",
]


def _answer(schema: strawberry.Schema, query: str) -> tuple[Any, Any]:
    result = asyncio.run(schema.execute(query, variable_values={"on": True}))
    errors = [(e.message, e.path) for e in result.errors or []]
    return result.data, errors


@pytest.mark.parametrize("query", QUERIES)
def test_answers_what_graphql_core_answers(query: str) -> None:
    assert _answer(flat, query) == _answer(plain, query)


def test_a_schema_with_its_own_default_resolver_is_answered_through_it() -> None:
    def shouting_getattr(source: Any, name: str) -> Any:
        value = getattr(source, name)
        return value.upper() if isinstance(value, str) else value

    config = StrawberryConfig(default_resolver=shouting_getattr)
    query = "{ items { id note leaf { name } } }"
    expected = _answer(strawberry.Schema(query=Query, config=config), query)
    custom = strawberry.Schema(
        query=Query, config=config, execution_context_class=FlatListExecutionContext
    )
    assert _answer(custom, query) == expected
    assert expected[0]["items"][0] == {"id": "I0", "note": "NOTE 0", "leaf": {"name": "L0"}}


def test_a_null_in_a_non_null_field_is_reported_with_its_path() -> None:
    data, errors = _answer(flat, "{ nullId { id } }")
    assert data is None
    assert errors == [("Cannot return null for non-nullable field Item.id.", ["nullId", 1, "id"])]


def test_resolve_hooks_still_see_every_field() -> None:
    hooked = strawberry.Schema(
        query=Query, execution_context_class=FlatListExecutionContext, extensions=[Shouting]
    )
    data, errors = _answer(hooked, "{ items { id note } }")
    assert not errors
    assert data["items"][0] == {"id": "I0", "note": "NOTE 0"}


class Counting(FlatListExecutionContext):
    """Counts the list items graphql-core completes one by one."""

    items = 0

    def complete_list_item_value(self, *args: Any, **kwargs: Any) -> Any:
        Counting.items += 1
        return super().complete_list_item_value(*args, **kwargs)


@pytest.mark.parametrize(
    ("query", "one_by_one"),
    [
        ("{ items { id leaf { name } leaves { name } tags } }", 0),
        ("{ items { id shout } }", 4),  # a resolver of its own: item by item
        ("{ nullId { id } }", 2),  # given up at the null, then item by item up to it
    ],
)
def test_plain_lists_complete_in_one_pass(query: str, one_by_one: int) -> None:
    counting = strawberry.Schema(query=Query, execution_context_class=Counting)
    Counting.items = 0
    _answer(counting, query)
    assert Counting.items == one_by_one


class Compiling(FlatListExecutionContext):
    """Counts the selections the executor works out how to complete."""

    compiled = 0

    def _compile(self, *args: Any, **kwargs: Any) -> Any:
        Compiling.compiled += 1
        return super()._compile(*args, **kwargs)


def _cached_schema() -> strawberry.Schema:
    # As the app's: every request of one query text gets the same parsed document.
    return strawberry.Schema(
        query=Query, execution_context_class=Compiling, extensions=[lambda: ParserCache(maxsize=8)]
    )


def test_a_repeated_document_is_completed_as_worked_out_the_first_time() -> None:
    schema = _cached_schema()
    query = "{ items { id leaf { name } leaves { name colour } } }"
    Compiling.compiled = 0
    first = _answer(schema, query)
    worked_out = Compiling.compiled
    assert worked_out > 0
    assert _answer(schema, query) == first == _answer(plain, query)
    assert Compiling.compiled == worked_out  # nothing worked out again


@pytest.mark.parametrize("on", [True, False])
def test_a_document_with_directives_is_worked_out_for_its_variables(on: bool) -> None:
    schema = _cached_schema()
    query = "query ($on: Boolean!) { items { id note @include(if: $on) size @skip(if: $on) } }"
    for variables in ({"on": not on}, {"on": on}):  # the same document, both ways
        answer = asyncio.run(schema.execute(query, variable_values=variables))
    expected = asyncio.run(plain.execute(query, variable_values={"on": on}))
    assert answer.data is not None
    assert answer.data == expected.data
    assert set(answer.data["items"][0]) == ({"id", "note"} if on else {"id", "size"})


def test_fragments_in_a_repeated_document_are_answered_alike() -> None:
    schema = _cached_schema()
    query = "{ items { ...F } } fragment F on Item { id leaf { ... on Leaf { name } } }"
    assert _answer(schema, query) == _answer(schema, query) == _answer(plain, query)
