"""Turns one event's attributes (as the JSON format or ce- headers gave them) into a
validated ``NewEvent``, or into a list of problems naming each offending attribute.

The rules are CloudEvents 1.0 (spec.md, json-format.md) plus Causeway's own extensions:
``stream``, ``expectedversion``, ``causationid``, ``correlationid``, ``modelname``,
``modelversion`` and ``modelsig``. Attributes Causeway sets on the way out
(``position``, ``streamversion``, ``storedtime``, ``prevhash``, ``hash``) cannot be sent
in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from app.errors import (
    AppError,
    EventTooLarge,
    InvalidCloudEvent,
    ReservedType,
    TimeInFuture,
    UnknownCause,
)
from app.store.records import EXACT_LIMIT, RESERVED_TYPE_PREFIX, NewEvent
from app.store.timestamps import parse_rfc3339
from ingest.cloudevents_types import DISALLOWED, FORMATS, INT32, NAME
from ingest.limits import Limits

_STRING_ATTRIBUTES = ("id", "source", "type", "subject", "datacontenttype", "dataschema")
_REQUIRED = ("id", "source", "type")
_STORED_ELSEWHERE = {
    "stream",
    "expectedversion",
    "causationid",
    "correlationid",
    "modelname",
    "modelversion",
    "modelsig",
}
SET_BY_STORE = frozenset({"position", "streamversion", "storedtime", "prevhash", "hash"})
_SET_BY_STORE = SET_BY_STORE
_NOT_EXTENSIONS = frozenset({*_STORED_ELSEWHERE, *_STRING_ATTRIBUTES, "specversion", "time"})
_PAYLOAD_MEMBERS = frozenset({"data", "data_base64"})
# Attribute names already found valid: producers send the same few names again and again.
_GOOD_NAMES: set[str] = set()
_MAX_GOOD_NAMES = 4096
# Ids and streams no producer takes first: Causeway's own events', and those POST
# /api/v1/lineage writes (runs, datasets and their versions: a forged one would show in
# an audit as training data), each with whose they are.
RESERVED_ID_PREFIXES = {
    "causeway:": "Causeway's own events",
    "openlineage:": "the events POST /api/v1/lineage writes",
}
_RESERVED_IDS = tuple(RESERVED_ID_PREFIXES)


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with one event; ``kind`` picks the error class of the response."""

    kind: type[AppError]
    index: int
    attribute: str
    detail: str


class EventProblems(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(problems[0].detail)
        self.problems = problems


# Not frozen, as NewEvent: one is built per event, and frozen it took four times as long.
# Treat it as immutable.
@dataclass(slots=True)
class Payload:
    """The event's data as received: a JSON value, raw bytes, or nothing."""

    present: bool = False
    value: Any = None
    binary: bytes | None = None
    size_bytes: int = 0


def build_event(
    index: int, attributes: dict[str, Any], payload: Payload, limits: Limits, *, binary: bool
) -> NewEvent:
    """Validate ``attributes`` (strings only when ``binary``) and build the event.

    Raises ``EventProblems`` listing every problem found in this event.
    """
    attrs = {k: v for k, v in attributes.items() if v is not None and k not in _PAYLOAD_MEMBERS}
    if not binary:
        event = _plainly_valid(attrs, payload, limits)
        if event is not None:
            return event
    return _checked(index, attrs, payload, limits, binary=binary)


def _plainly_valid(attrs: dict[str, Any], payload: Payload, limits: Limits) -> NewEvent | None:
    """The event, when ``attrs`` are of the usual kind and break no rule; None otherwise
    (then ``_checked`` decides, and names every problem). A third of the cost of the
    full check: most producers send the same few string attributes again and again."""
    if not _GOOD_NAMES.issuperset(attrs) or "expectedversion" in attrs:
        return None
    if ("modelname" in attrs) is not ("modelversion" in attrs) or (
        "modelsig" in attrs and "modelname" not in attrs
    ):
        return None  # a model named in part
    values = attrs.values()
    try:
        joined = "".join(values)  # a TypeError when an attribute is not a string
    except TypeError:
        return None
    if not joined.isprintable() or "" in values or attrs.get("specversion") != "1.0":
        return None
    event_id, source, event_type = attrs.get("id"), attrs.get("source"), attrs.get("type")
    if event_id is None or source is None or event_type is None or not _nameable(event_id):
        return None
    stream = attrs.get("stream") or attrs.get("subject") or source
    if (
        event_type.startswith(RESERVED_TYPE_PREFIX)
        or event_id.startswith(_RESERVED_IDS)
        or stream.startswith(_RESERVED_IDS)
    ):
        return None
    time_text = attrs.get("time")
    time_value = None
    if time_text is not None:
        time_value, _ = parse_rfc3339(time_text)
        if time_value is None or (
            limits.max_future_s is not None and _too_far_ahead(time_value, limits.max_future_s)
        ):
            return None
    for name, (pattern, _) in FORMATS.items():
        value = attrs.get(name)
        if value is not None and not pattern.match(value):
            return None
    causes: tuple[str, ...] = ()
    causation = attrs.get("causationid")
    if causation is not None:
        parts = [p.strip() for p in causation.split(",")]
        if "" in parts or event_id in parts:
            return None
        causes = tuple(dict.fromkeys(parts))
    if (
        len(orjson.dumps(attrs)) > limits.max_attributes_bytes
        or payload.size_bytes > limits.max_event_data_bytes
    ):
        return None
    return _new_event(attrs, payload, stream, time_value, causes, None)


def _checked(
    index: int, attrs: dict[str, Any], payload: Payload, limits: Limits, *, binary: bool
) -> NewEvent:
    """The event of ``attrs``, or ``EventProblems`` naming every problem, in the order
    of the checks below (the order the response lists them in)."""
    # One list, passed down: the slow path builds nothing more per event than it did.
    problems: list[Problem] = []
    # A number written with a fraction of zero (7.0) is the integer it equals, as JSON
    # Schema has it (and the OpenAPI document says "integer"); one past 2**53 (1e20) is no
    # exact integer, and stays the float it is.
    attrs = {k: int(v) if _whole(v) else v for k, v in attrs.items()}
    _check_names_and_values(problems, index, attrs)
    _check_context(problems, index, attrs)
    time_value = _checked_time(problems, index, attrs, limits.max_future_s)
    expected = _checked_expected_version(problems, index, attrs, binary=binary)
    causes = _checked_causes(problems, index, attrs)
    _check_string_extensions(problems, index, attrs)
    _check_model_named_whole(problems, index, attrs)
    _check_reserved(problems, index, attrs)
    _check_sizes(problems, index, attrs, payload, limits, binary=binary)
    if problems:
        raise EventProblems(problems)

    stream = str(attrs.get("stream") or attrs.get("subject") or attrs["source"])
    return _new_event(attrs, payload, stream, time_value, causes, expected)


def _report(
    problems: list[Problem],
    index: int,
    attribute: str,
    detail: str,
    kind: type[AppError] = InvalidCloudEvent,
) -> None:
    problems.append(Problem(kind, index, attribute, detail))


def _check_names_and_values(problems: list[Problem], index: int, attrs: dict[str, Any]) -> None:
    """Every attribute: a name of lower-case letters and digits that the store does not
    set, and a printable string, a 32-bit integer or a boolean as its value."""
    for name, value in attrs.items():
        if name not in _GOOD_NAMES:
            if not NAME.match(name):
                _report(
                    problems,
                    index,
                    name,
                    f"attribute name {name!r} must be lower-case letters and digits only",
                )
                continue
            if name in _SET_BY_STORE:
                _report(
                    problems,
                    index,
                    name,
                    f"attribute {name!r} is set by the store and cannot be sent",
                )
                continue
            if len(_GOOD_NAMES) < _MAX_GOOD_NAMES:
                _GOOD_NAMES.add(name)
        kind = type(value)
        if kind is str:
            # isprintable() is a fast yes for almost every value; the regex decides the rest.
            if not value.isprintable() and DISALLOWED.search(value):
                _report(
                    problems,
                    index,
                    name,
                    f"attribute {name!r} contains a control character or a Unicode noncharacter",
                )
        elif kind is int:
            if not INT32[0] <= value <= INT32[1]:
                _report(
                    problems, index, name, f"attribute {name!r} is outside the 32-bit integer range"
                )
        elif kind is not bool:
            _report(
                problems, index, name, f"attribute {name!r} must be a string, integer or boolean"
            )


def _check_context(problems: list[Problem], index: int, attrs: dict[str, Any]) -> None:
    """The CloudEvents context attributes but ``time``: specversion, the required ones,
    the ones that must be strings, and the formats of the ones that have one."""
    specversion = attrs.get("specversion")
    if specversion != "1.0":
        # Not repr() of any value: one nested a thousand deep fails it (RecursionError).
        got = f"got {specversion[:64]!r}" if isinstance(specversion, str) else "not a string"
        _report(problems, index, "specversion", f"specversion must be '1.0', {got}")
    for name in _REQUIRED:
        if name not in attrs or attrs[name] == "":
            _report(problems, index, name, f"required attribute {name!r} is missing or empty")
    for name in _STRING_ATTRIBUTES:
        if name in attrs and not isinstance(attrs[name], str):
            _report(problems, index, name, f"attribute {name!r} must be a string")
    if isinstance(attrs.get("id"), str) and attrs["id"] and not _nameable(attrs["id"]):
        _report(
            problems,
            index,
            "id",
            "id must not contain a comma or begin or end with whitespace: "
            "no causationid could name it",
        )
    if attrs.get("subject") == "":
        _report(problems, index, "subject", "subject must not be empty when present")
    for name, (pattern, what) in FORMATS.items():
        value = attrs.get(name)
        if isinstance(value, str) and not pattern.match(value):
            _report(problems, index, name, f"{name} must be {what}, got {value!r}")


def _checked_time(
    problems: list[Problem], index: int, attrs: dict[str, Any], max_future_s: float | None
) -> datetime | None:
    """``time`` parsed (None when absent or invalid); more than ``max_future_s`` ahead of
    the server's clock is a problem too."""
    time_text = attrs.get("time")
    time_value = None
    if time_text is not None:
        if isinstance(time_text, str):
            time_value, why = parse_rfc3339(time_text)
            if why:
                _report(problems, index, "time", why)
            elif time_value is not None and max_future_s is not None:
                detail = too_far_ahead(
                    "time", time_text, time_value, max_future_s, datetime.now(UTC)
                )
                if detail is not None:
                    _report(problems, index, "time", detail, TimeInFuture)
        else:
            _report(problems, index, "time", "time must be an RFC 3339 string")
    return time_value


def _too_far_ahead(at: datetime, max_future_s: float, now: datetime | None = None) -> bool:
    return at - (now or datetime.now(UTC)) > timedelta(seconds=max_future_s)


def too_far_ahead(
    name: str, text: str, at: datetime, max_future_s: float, now: datetime
) -> str | None:
    """Why a time ``text`` (the attribute ``name``, read as ``at``) is refused for being
    more than ``max_future_s`` ahead of the server's clock ``now``; None when it is not.
    The one wording of the refusal, for CloudEvents and OpenLineage's ``eventTime``."""
    if not _too_far_ahead(at, max_future_s, now):
        return None
    ahead = (at - now).total_seconds()
    return (
        f"{name} {text} is {ahead:.3f} s ahead of the server's clock "
        f"({now.isoformat().replace('+00:00', 'Z')}); at most {max_future_s:g} s "
        "is taken (CAUSEWAY_MAX_FUTURE_S)"
    )


def _checked_expected_version(
    problems: list[Problem], index: int, attrs: dict[str, Any], *, binary: bool
) -> int | None:
    """``expectedversion`` as an integer (None when absent or invalid); a ce- header
    (``binary``) gives it as a string of digits."""
    expected = attrs.get("expectedversion")
    if expected is not None:
        # ASCII digits only: isdigit() alone takes "²" and other scripts' digits.
        if binary and isinstance(expected, str) and expected.isascii() and expected.isdigit():
            # By length first (int() refuses past 4,300 digits), leading zeros aside.
            digits = expected.lstrip("0") or "0"
            expected = int(digits) if len(digits) <= 10 else INT32[1] + 1
        if isinstance(expected, bool) or not isinstance(expected, int) or expected < 0:
            _report(
                problems, index, "expectedversion", "expectedversion must be a non-negative integer"
            )
            expected = None
        elif binary and expected > INT32[1]:  # a JSON integer was checked with the rest
            _report(
                problems,
                index,
                "expectedversion",
                "attribute 'expectedversion' is outside the 32-bit integer range",
            )
            expected = None
    return expected


def _checked_causes(problems: list[Problem], index: int, attrs: dict[str, Any]) -> tuple[str, ...]:
    """The ids ``causationid`` names, each once, in order (none when absent or invalid)."""
    causes: tuple[str, ...] = ()
    causation = attrs.get("causationid")
    if causation is not None:
        # str() of a value that is no string could fail (nested a thousand deep).
        parts = [p.strip() for p in causation.split(",")] if isinstance(causation, str) else []
        if not isinstance(causation, str) or any(not p for p in parts):
            _report(
                problems,
                index,
                "causationid",
                "causationid must be one event id, or ids separated by commas",
            )
        else:
            causes = tuple(dict.fromkeys(parts))
            if attrs.get("id") in causes:
                _report(
                    problems,
                    index,
                    "causationid",
                    "an event cannot be its own cause",
                    kind=UnknownCause,
                )
    return causes


def _check_string_extensions(problems: list[Problem], index: int, attrs: dict[str, Any]) -> None:
    """``stream``, ``correlationid`` and the model's attributes: non-empty strings."""
    for name in ("stream", "correlationid", "modelname", "modelversion", "modelsig"):
        if name in attrs and (not isinstance(attrs[name], str) or attrs[name] == ""):
            _report(problems, index, name, f"{name} must be a non-empty string")


def _check_model_named_whole(problems: list[Problem], index: int, attrs: dict[str, Any]) -> None:
    """A model is named by ``modelname`` and ``modelversion`` together, or not at all."""
    given = [name for name in ("modelname", "modelversion", "modelsig") if name in attrs]
    lacking = [name for name in ("modelname", "modelversion") if name not in attrs]
    if given and lacking:
        # The registry checks a name and version together: half of the pair would be
        # stored unchecked, and read as no model at all.
        _report(
            problems,
            index,
            lacking[0],
            f"{' and '.join(given)} without {' and '.join(lacking)}: a model version is "
            "named by modelname and modelversion together",
        )


def _check_reserved(problems: list[Problem], index: int, attrs: dict[str, Any]) -> None:
    """Ids, streams and types that only Causeway's own events may take."""
    # The stream may come from ``stream``, else ``subject``, else ``source``: a problem
    # with it is the problem of the attribute it came from.
    streamed = next((n for n in ("stream", "subject", "source") if attrs.get(n)), "stream")
    for name, what in (("id", "id"), (streamed, "stream")):
        value = attrs.get(name)
        if isinstance(value, str) and value.startswith(_RESERVED_IDS):
            prefix = next(p for p in _RESERVED_IDS if value.startswith(p))
            came = "" if name == what else f" (the stream is the {name})"
            _report(
                problems,
                index,
                name,
                f"{what}s starting with {prefix!r} belong to {RESERVED_ID_PREFIXES[prefix]}{came}",
                kind=ReservedType,
            )
    event_type = attrs.get("type")
    if isinstance(event_type, str) and event_type.startswith(RESERVED_TYPE_PREFIX):
        _report(
            problems,
            index,
            "type",
            f"types starting with {RESERVED_TYPE_PREFIX!r} are written by Causeway only",
            kind=ReservedType,
        )


def _check_sizes(
    problems: list[Problem],
    index: int,
    attrs: dict[str, Any],
    payload: Payload,
    limits: Limits,
    *,
    binary: bool,
) -> None:
    """The attributes (as compact JSON) and the data, each within its limit. (An
    attribute that is no string, integer or boolean is a problem already: one nested past
    what orjson writes is not measured.) The attributes' problem is the whole event's
    (attribute ""); the data's names the member that carried it."""
    try:
        attribute_bytes = len(orjson.dumps(attrs))
    except TypeError:
        attribute_bytes = 0
    if attribute_bytes > limits.max_attributes_bytes:
        _report(
            problems,
            index,
            "",
            f"attributes take {attribute_bytes} bytes, over the {limits.max_attributes_bytes}-byte "
            f"limit by {attribute_bytes - limits.max_attributes_bytes}",
            kind=EventTooLarge,
        )
    if payload.size_bytes > limits.max_event_data_bytes:
        _report(
            problems,
            index,
            "data_base64" if payload.binary is not None and not binary else "data",
            f"data takes {payload.size_bytes} bytes, over the {limits.max_event_data_bytes}-byte "
            f"limit by {payload.size_bytes - limits.max_event_data_bytes}",
            kind=EventTooLarge,
        )


def _whole(value: Any) -> bool:
    return type(value) is float and value.is_integer() and abs(value) < EXACT_LIMIT


def _nameable(event_id: str) -> bool:
    """Whether a causationid can name ``event_id``: it splits on commas and strips each id."""
    return "," not in event_id and event_id == event_id.strip()


def _new_event(
    attrs: dict[str, Any],
    payload: Payload,
    stream: str,
    time_value: datetime | None,
    causes: tuple[str, ...],
    expected_version: int | None,
) -> NewEvent:
    """The event of valid ``attrs``, ``payload`` and what was derived from them."""
    # Positional, in NewEvent's field order: keywords cost three times as much here.
    return NewEvent(
        str(attrs["id"]),
        str(attrs["source"]),
        str(attrs["type"]),
        stream,
        attrs.get("subject"),
        attrs.get("time"),
        time_value,
        attrs.get("datacontenttype"),
        attrs.get("dataschema"),
        payload.present,
        payload.value,
        payload.binary,
        {k: v for k, v in attrs.items() if k not in _NOT_EXTENSIONS},
        causes,
        attrs.get("correlationid"),
        attrs.get("modelname"),
        attrs.get("modelversion"),
        attrs.get("modelsig"),
        expected_version,
        True,  # the payload's numbers are normalised (ingest.binding's _storable)
    )
