"""The schema's own scalars: ``BigInt``, an integer past GraphQL's 32-bit ``Int`` (positions,
row counts, sizes), sent as a JSON number; and ``JSON`` as Strawberry has it, each value
charged to the request's answer budget by its size as it is completed."""

import json
from typing import NewType

import strawberry

from app.errors import BadRequest
from app.graphql.context import CURRENT_BUDGET
from app.store.records import MAX_POSITION, parse_position

__all__ = ["BIG_INT", "JSON_VALUE", "BigInt"]

BigInt = NewType("BigInt", int)  # GraphQL's Int is 32 bits; positions outgrow it


def _parse_big_int(value: object) -> int:
    # graphql-core hands a literal past what int() reads as nan, and orjson a JSON
    # integer past 64 bits as a float: neither is an int or a str, so both are refused.
    found = (
        parse_position(str(value))
        if isinstance(value, int | str) and not isinstance(value, bool)
        else None
    )
    if found is None:
        shown = json.dumps(value, default=str)  # as it was sent: true, 1e+30, "x"
        raise BadRequest(f"{shown} is not a position: an integer from 0 to {MAX_POSITION}")
    return found


BIG_INT = strawberry.scalar(
    name="BigInt",
    serialize=int,
    parse_value=_parse_big_int,
    description="An integer that may exceed 32 bits (positions, row counts, sizes), as a JSON number.",
)


def _charged(value: object) -> object:
    budget = CURRENT_BUDGET.get()
    if budget is not None:
        budget.spend_json(value)  # past the budget: AnswerTooLarge, the request's answer
    return value


_ECMA_404 = (
    "https://ecma-international.org/wp-content/uploads/ECMA-404_2nd_edition_december_2017.pdf"
)
JSON_VALUE = strawberry.scalar(
    name="JSON",
    serialize=_charged,
    parse_value=lambda value: value,
    description=f"The `JSON` scalar type represents JSON values as specified by [ECMA-404]({_ECMA_404}).",
    specified_by_url=_ECMA_404,
)
