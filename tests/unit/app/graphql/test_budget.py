"""The cap on a GraphQL document with its fragments expanded (``app.graphql.budget``)."""

from __future__ import annotations

import time

import pytest
from graphql import get_introspection_query, parse

from app.graphql.budget import over_budget
from app.graphql.limits import GraphQLLimits

LIMITS = GraphQLLimits()


def chain(n: int) -> str:
    fragments = " ".join(f"fragment F{i} on Query{{...F{i + 1} ...F{i + 1}}}" for i in range(n))
    return f"query{{...F0}} {fragments} fragment F{n} on Query{{__typename}}"


class TestOverBudget:
    def test_the_fragment_chain_of_issue_37_is_refused_at_once(self) -> None:
        document = parse(chain(30))
        started = time.perf_counter()
        refusal = over_budget(document, LIMITS)
        assert time.perf_counter() - started < 0.05  # 2^30 selections, counted once each
        assert refusal is not None
        assert refusal.extensions == {"code": "BAD_REQUEST"}

    @pytest.mark.parametrize(
        ("query", "says"),
        [
            ("{" + " ...F" * 101 + "} fragment F on Query{id:__typename a:__typename"
             + " b:__typename c:__typename d:__typename e:__typename f:__typename"
             + " g:__typename h:__typename i:__typename}", "graphql_max_selections"),
            ("{" + " __typename" * 11 + "}", "'__typename' 11 times"),
            ("{...A ...B} fragment A on Query{__typename} fragment B on Query{__typename"
             + " ...C} fragment C on Query{" + " __typename" * 9 + "}", "11 times"),
            ("{__typename} " + " ".join(f"fragment F{i} on Query{{__typename}}"
                                         for i in range(33)), "33 fragments"),
            # No such fragment: Strawberry's depth limiter, the first rule, fails on it
            # with a bare KeyError rather than the standard rule's error.
            ("{...Missing}", "Unknown fragment 'Missing'"),
        ],
    )  # fmt: skip
    def test_each_cap_refuses_and_says_which(self, query: str, says: str) -> None:
        refusal = over_budget(parse(query), LIMITS)
        assert refusal is not None
        assert says in refusal.message

    @pytest.mark.parametrize(
        "query",
        [
            get_introspection_query(descriptions=True, input_value_deprecation=True),
            chain(3),
            "{...F ...F} fragment F on Query{...F}",  # a cycle: the standard rules refuse it
            '{a: event(id: "x") { id causes { id } } b: event(id: "y") { id }}',
        ],
    )
    def test_what_fits_passes_to_validation(self, query: str) -> None:
        assert over_budget(parse(query), LIMITS) is None
