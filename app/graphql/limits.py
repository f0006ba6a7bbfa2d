"""The caps that keep one GraphQL request from costing the server too much."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GraphQLLimits:
    max_request_bytes: int = 1 << 20  # a request's body: the query and its variables
    max_query_depth: int = 12  # nesting of selections
    max_tokens: int = 2000  # tokens in the query document
    max_aliases: int = 20  # aliased fields in one document
    # With every fragment expanded at every spread (app.graphql.budget): selections in the
    # document's operations, fragments it defines, times one name is selected in one set.
    max_selections: int = 1000
    max_fragments: int = 32
    max_repeated_fields: int = 10
    max_page_size: int = 500  # ``first`` is cut to this
    max_lineage_depth: int = 100  # ``maxDepth`` is cut to this
    max_lineage_nodes: int = 10_000  # ``limit`` is cut to this
    timeout_ms: int = 5000  # a walk, and a request starting more work; past it, TIMEOUT
    # List items in one answer, and events loaded to build it: nested effects and causes
    # multiply each other's page sizes, which no cap above bounds.
    max_answer_items: int = 100_000
    # Bytes of JSON values (events' data and extensions, facets) in one answer: an item
    # counts one however large its data, and one event of 1 MiB repeated by every effect
    # that lists it among its causes, and again by every alias, made gigabytes.
    max_answer_bytes: int = 128 << 20
