"""Validation of an OpenLineage event against the spec's published JSON Schema
(``spec/OpenLineage.json``, copied unchanged from the OpenLineage repository; see
``spec/README.md``), with the ``jsonschema`` package's Draft 2020-12 validator.

The top level is ``oneOf: RunEvent | DatasetEvent | JobEvent``. A failed ``oneOf`` only
says "valid under none", so the event is first held to the one branch its members name
(``run``: a RunEvent, else ``dataset``: a DatasetEvent, else ``job``: a JobEvent), whose
errors point into the event; then to the whole schema where the branch alone may not
decide the ``oneOf`` (``_others``). An event that fails the branch its members name is
held to the other two (the spec takes a DatasetEvent with a ``run`` member, say). Formats are checked: ``uuid`` (a
``runId``) and ``date-time`` (``eventTime``, RFC 3339).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from functools import cache
from importlib import resources
from itertools import islice
from typing import Any

import orjson
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError, relevance
from referencing import Registry, Resource

from app.errors import InvalidOpenLineageEvent
from app.store.timestamps import parse_rfc3339

SPEC_ID = "https://openlineage.io/spec/2-0-2/OpenLineage.json"


class Kind(enum.Enum):
    RUN = "RunEvent"
    DATASET = "DatasetEvent"
    JOB = "JobEvent"


@cache
def _spec() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("spec/OpenLineage.json").read_bytes()
    spec: dict[str, Any] = orjson.loads(text)
    return spec


def _checker() -> FormatChecker:
    checker = FormatChecker(formats=("uuid",))

    @checker.checks("date-time")
    def _is_date_time(value: object) -> bool:
        return not isinstance(value, str) or parse_rfc3339(value)[0] is not None

    return checker


@cache
def _validators() -> dict[Kind | None, Draft202012Validator]:
    spec = _spec()
    registry: Registry[Any] = Registry().with_resource(SPEC_ID, Resource.from_contents(spec))
    checker = _checker()
    found: dict[Kind | None, Draft202012Validator] = {
        None: Draft202012Validator(spec, registry=registry, format_checker=checker)
    }
    for kind in Kind:
        branch = {"$ref": f"{SPEC_ID}#/$defs/{kind.value}"}
        found[kind] = Draft202012Validator(branch, registry=registry, format_checker=checker)
    return found


def kind_of(event: Any) -> Kind | None:
    """The kind of event ``event`` says it is by its members (None: not an object)."""
    if not isinstance(event, dict):
        return None
    if "run" in event:
        return Kind.RUN
    if "dataset" in event:
        return Kind.DATASET
    return Kind.JOB if "job" in event else None


def validate(event: Any) -> Kind:
    """The kind of a valid ``event``; raises ``InvalidOpenLineageEvent`` naming the first
    error by its JSON Pointer (``#/run/runId``) otherwise.

    An event its members name wrongly (a DatasetEvent with a ``run`` member of its own, a
    JobEvent with a ``dataset`` member that is no dataset: the spec's schema takes both)
    fails that branch and is then held to the others; the first branch's error is the
    refusal when none takes it."""
    named = kind_of(event)
    validators = _validators()
    first = _first(validators[named].iter_errors(event))
    if first is None:
        kind = named
        checks = _others(event, kind)
    else:
        kind = _valid_as_another(event, named)
        if kind is None:
            raise _refusal(first, named)
        checks = [validators[None]]  # and no other branch too (the oneOf)
    for validator in checks:
        error = _first(validator.iter_errors(event))
        if error is not None:
            raise _refusal(error, kind)
    if kind is None:  # cannot be: the whole schema holds, so one branch matched
        raise InvalidOpenLineageEvent("not a RunEvent, DatasetEvent or JobEvent", schema=SPEC_ID)
    return kind


def _valid_as_another(event: Any, named: Kind | None) -> Kind | None:
    """A branch other than ``named`` that ``event`` is valid under. Each stops at its first
    error: a hostile event fails each at once."""
    if named is None:
        return None  # not an object: no branch takes it
    validators = _validators()
    for kind in Kind:
        if kind is not named and next(validators[kind].iter_errors(event), None) is None:
            return kind
    return None


def _others(event: Any, kind: Kind | None) -> list[Draft202012Validator]:
    """The whole schema (``kind`` None: it was the first), when an event valid as ``kind``
    may still break its ``oneOf``:
    only a DatasetEvent that has a ``job`` may be a valid JobEvent too. A RunEvent (it has
    ``run`` and ``job``) is neither of the others (a JobEvent has no ``run``, a
    DatasetEvent not both), and a JobEvent (no ``run``, no ``dataset``) neither. Held to
    the whole schema again, each dataset of a large event was validated six times."""
    if kind is Kind.DATASET and "job" in event:
        return [_validators()[None]]
    return []


def _first(errors: Iterable[ValidationError]) -> ValidationError | None:
    """The first error in document order (by path); of several at that path, the most
    relevant (``jsonschema``'s own ranking, as ``best_match`` uses it). An ``anyOf`` or
    ``oneOf`` of one branch (the spec wraps each map of facets in one) is told by the first
    of that branch's errors, as ``best_match`` descends: the facet that lacks
    ``_schemaURL``, not the whole map. Of several branches (RunEvent | DatasetEvent |
    JobEvent), no branch's error is the one: the ``oneOf`` is.

    Of the first ``_MAX_ERRORS`` only: a hostile event (``"inputs": [1, 1, ...]``, an
    error for each item) took 8 s to refuse at 128 KB, and 90 s and 5 GB at 1 MiB, with
    every error collected to find the first (about 150 us each: 40 ms at most now)."""
    found = list(islice(errors, _MAX_ERRORS))
    if not found:
        return None
    earliest = min(_place(e) for e in found)
    first = max((e for e in found if _place(e) == earliest), key=relevance)
    if first.context and len({e.relative_schema_path[0] for e in first.context}) == 1:
        return _first(first.context)
    return first


# Errors are reported as the schema and the document are walked: an array's items in
# order, but a map's members (a facet map's ``additionalProperties``) in no fixed order.
# So an event with more errors than this names the earliest of the first this many, which
# may differ from process to process; one with fewer, its earliest, always.
_MAX_ERRORS = 256


def _place(error: ValidationError) -> tuple[tuple[bool, int | str], ...]:
    """Where ``error`` is in the document, ordered as the document is (item 2 before 10)."""
    return tuple((isinstance(p, str), p) for p in error.absolute_path)


def pointer(path: Any) -> str:
    """An RFC 6901 JSON Pointer as a URI fragment, like the store's other problems."""
    parts = (str(p).replace("~", "~0").replace("/", "~1") for p in path)
    return "#" + "".join("/" + p for p in parts)


def _refusal(error: ValidationError, kind: Kind | None) -> InvalidOpenLineageEvent:
    where = pointer(error.absolute_path)
    what = (
        kind.value if kind is not None else "OpenLineage event (RunEvent, DatasetEvent, JobEvent)"
    )
    detail = f"not a valid {what} of spec 2-0-2: {where}: {error.message}"
    return InvalidOpenLineageEvent(
        detail,
        errors=[{"pointer": where, "detail": error.message}],
        schema=SPEC_ID,
    )
