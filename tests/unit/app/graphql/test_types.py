"""The GraphQL object types built from stored events."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from app.graphql.limits import GraphQLLimits
from app.graphql.schema import create_schema
from app.graphql.types import Event
from app.store.chain import ChainRecord
from app.store.records import StoredEvent
from tests.unit.app.store.test_chain import RECORD


@pytest.mark.parametrize(
    "record",
    [
        pytest.param(RECORD, id="JSON data"),
        pytest.param(dataclasses.replace(RECORD, data=None, data_binary=b"\x00"), id="binary"),
    ],
)
def test_an_event_is_what_its_dataclass_init_would_make(record: ChainRecord) -> None:
    """``Event.of`` sets the attributes at once, bypassing ``__init__``: it must set every
    field ``__init__`` takes, to the same values, and nothing else."""
    stored = StoredEvent(record, bytes(32), bytes(range(32)))
    made = Event.of(stored)
    fields = {f.name for f in dataclasses.fields(Event) if f.init}
    assert set(vars(made)) == fields
    assert made == Event(**{name: getattr(made, name) for name in fields})
    assert made.id == "e-1"
    assert made.recorded_time == "2026-11-30T12:00:01.000005Z"
    assert made.hash == bytes(range(32)).hex()
    data: Any = made.data
    assert data == (None if record.data_binary else record.data)


def test_the_event_filters_bounds_say_whether_they_are_included() -> None:
    """A client reads from the schema alone whether an event at ``timeTo`` is in the answer."""
    query = '{ __type(name: "EventFilter") { inputFields { name description } } }'
    found = create_schema(GraphQLLimits()).execute_sync(query)
    assert found.errors is None
    assert found.data is not None
    fields = found.data["__type"]["inputFields"]
    bounds = {f["name"]: f["description"] for f in fields if f["name"].endswith(("From", "To"))}
    assert bounds == {
        "timeFrom": "Events whose time is at or after this (RFC 3339).",
        "timeTo": "Events whose time is before this (RFC 3339): the end is left out.",
        "positionFrom": "Events at this position or later.",
        "positionTo": "Events at this position or earlier.",
    }
