"""A cap on a GraphQL document's size *with its fragments expanded*, checked before any
validation rule runs.

A document of a few hundred tokens can stand for an exponential one: a fragment that
spreads the next one twice, thirty deep, is 2^30 selections once expanded. Strawberry's
``QueryDepthLimiter`` walks a fragment again at every spread, and graphql-core's
``OverlappingFieldsCanBeMergedRule`` compares every pair of same-named fields and every
pair of fragments of a selection set: either held the event loop for seconds (30
fragments: minutes) on such a document.

``over_budget`` measures an operation with every fragment expanded at every spread, in
time linear in the document (each fragment is measured once and remembered), and stops
at the first cap it passes: the selections (fields, fragment spreads, inline fragments)
the expanded operations hold (``graphql_max_selections``), the fragments the document
defines (``graphql_max_fragments``), and how often one response name is selected in one
selection set (``GraphQLLimits.max_repeated_fields``). ``BoundedValidation`` refuses a
document over a cap with a GraphQL error (``BAD_REQUEST``) and runs no validation rule
on it. Under the caps every rule's work is bounded: the depth limiter's walk visits
each expanded selection once; the overlap rule compares the pairs of same-named fields
of a set (at most ``max_repeated_fields`` of each name) and the pairs of fragments
(at most ``max_fragments`` of them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
)
from strawberry.extensions import SchemaExtension, ValidationCache

from app.graphql.limits import GraphQLLimits


class _Refused(Exception):
    pass


class _Measure:
    """One pass over a document, each fragment measured once (``_sizes``, ``_names``)."""

    def __init__(self, document: DocumentNode, limits: GraphQLLimits) -> None:
        self._fragments = {
            d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
        }
        self._limits = limits
        self._sizes: dict[str, tuple[int, Counter[str]]] = {}
        self._total = 0
        if len(self._fragments) > limits.max_fragments:
            raise _Refused(
                f"the document defines {len(self._fragments)} fragments, over the limit of "
                f"{limits.max_fragments} (graphql_max_fragments)"
            )

    def operations(self, document: DocumentNode) -> None:
        for definition in document.definitions:
            if isinstance(definition, OperationDefinitionNode):
                size, _ = self._set(definition.selection_set, frozenset())
                self._count(size)
                self._total += size

    def _count(self, size: int) -> None:
        if self._total + size > self._limits.max_selections:
            raise _Refused(
                f"the document selects more than {self._limits.max_selections} fields and "
                "fragments once its fragments are expanded at every spread, over the limit "
                "(graphql_max_selections); ask for less, or spread each fragment fewer times"
            )

    def _set(
        self, selection_set: SelectionSetNode, inside: frozenset[str]
    ) -> tuple[int, Counter[str]]:
        """The expanded size of ``selection_set`` and how often each response name is
        selected at its level (fragments and inline fragments merged in)."""
        size = 0
        names: Counter[str] = Counter()
        for selection in selection_set.selections:
            size += 1
            if isinstance(selection, FieldNode):
                names[(selection.alias or selection.name).value] += 1
                if selection.selection_set:
                    size += self._set(selection.selection_set, inside)[0]
            elif isinstance(selection, InlineFragmentNode):
                inner, inner_names = self._set(selection.selection_set, inside)
                size += inner
                names.update(inner_names)
            elif isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                if name not in self._fragments:
                    # graphql-core's rule would say so, but the depth limiter, which runs
                    # first, looks the name up and fails with a bare KeyError.
                    raise _Refused(f"Unknown fragment {name!r}.")
                if name in inside:
                    continue  # a cycle: the standard rules refuse it
                if name not in self._sizes:
                    self._sizes[name] = self._set(
                        self._fragments[name].selection_set, inside | {name}
                    )
                inner, inner_names = self._sizes[name]
                size += inner
                names.update(inner_names)
            self._count(size)
        self._repeats(names)
        return size, names

    def _repeats(self, names: Counter[str]) -> None:
        if not names:
            return
        name, times = names.most_common(1)[0]
        if times > self._limits.max_repeated_fields:
            raise _Refused(
                f"one selection set selects {name!r} {times} times once its fragments are "
                f"expanded, over the limit of {self._limits.max_repeated_fields}"
            )


def over_budget(document: DocumentNode, limits: GraphQLLimits) -> GraphQLError | None:
    """The refusal of ``document`` when, with its fragments expanded, it is over one of
    ``limits``' caps on a document's size; ``None`` when it is within them."""
    try:
        _Measure(document, limits).operations(document)
    except _Refused as refused:
        return GraphQLError(str(refused), extensions={"code": "BAD_REQUEST"})
    except RecursionError:  # nesting past Python's stack is past any cap
        return GraphQLError(
            "the document nests too deep to measure", extensions={"code": "BAD_REQUEST"}
        )
    return None


def bounded_validation(limits: GraphQLLimits, cache_size: int) -> type[SchemaExtension]:
    """The extension that validates a document (with Strawberry's ``ValidationCache``)
    only when ``over_budget`` passes it: it takes that cache's place in the schema's
    extensions."""

    class BoundedValidation(SchemaExtension):
        def __init__(self) -> None:
            super().__init__()
            self._cache = ValidationCache(maxsize=cache_size)

        def on_validate(self) -> Iterator[None]:
            context = self.execution_context
            document = context.graphql_document
            refusal = None if document is None else over_budget(document, limits)
            if refusal is not None:
                context.pre_execution_errors = [refusal]
                yield
                return
            self._cache.execution_context = context
            yield from self._cache.on_validate()

    return BoundedValidation
