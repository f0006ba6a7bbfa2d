"""The values the store takes and gives: events to append, outcomes, and read filters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, NamedTuple

from pydantic import AfterValidator, BeforeValidator, Field, Strict

from app.errors import BadRequest
from app.store.chain import ChainRecord, seals

MAX_POSITION = 2**63 - 1  # positions and versions are PostgreSQL bigints
RESERVED_TYPE_PREFIX = "causeway."  # the types of the events Causeway writes itself


def parse_position(text: str) -> int | None:
    """``text`` as a position or version, or None: ASCII digits only (``str.isdigit``
    alone takes "²", which ``int`` refuses), and no more than ``MAX_POSITION`` (checked by
    length first: ``int`` refuses past 4,300 digits)."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(MAX_POSITION)):
        return None
    value = int(text)
    return value if value <= MAX_POSITION else None


# The deepest nesting of arrays and objects JSON the store keeps may have (event data, a
# signature's defaults). orjson writes no more than 254 levels, and every answer that
# carries such JSON (the hash chain's encoding, replay, GraphQL) wraps it in a few levels
# of its own: JSON nested deeper could be stored but not hashed or read back.
MAX_DATA_DEPTH = 128
# RFC 7493 (I-JSON): the integers an IEEE double holds exactly are those within ±2**53;
# JSON the store keeps holds no number beyond (nor an infinity, which JSON has no form for).
EXACT_LIMIT = 2**53


def nests_deeper(value: Any, levels: int = MAX_DATA_DEPTH) -> bool:
    """Whether ``value`` nests arrays and objects more than ``levels`` deep (a scalar nests
    none, ``[1]`` one level). A level at a time, without recursion: the value may nest a
    thousand levels, and only containers are carried to the next level."""
    level = [value] if type(value) is dict or type(value) is list else []
    depth = 0
    while level:
        depth += 1
        if depth > levels:
            return True
        below: list[Any] = []
        for item in level:
            children = item.values() if type(item) is dict else item
            below += [c for c in children if type(c) is dict or type(c) is list]
        level = below
    return False


class DuplicateMember(ValueError):
    """A JSON object names ``name`` twice: I-JSON (RFC 7493) forbids it, and a parser that
    keeps the last member would read another value than the sender meant."""

    def __init__(self, name: str) -> None:
        super().__init__(f"names the member {name!r} twice in one object")
        self.name = name


def unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An ``object_pairs_hook`` for ``json.loads``: the object, or ``DuplicateMember``."""
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise DuplicateMember(name)
            seen.add(name)
    return document


def contains_nul(value: Any) -> bool:
    """Whether a string in JSON ``value`` (a key too) holds U+0000, which neither ``text``
    nor ``jsonb`` can store. Recursive: check the depth (``nests_deeper``) first."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any("\x00" in k or contains_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(contains_nul(v) for v in value)
    return False


TEXT_PATTERN = r"^[^\x00]*$"  # text PostgreSQL can store: no U+0000


def _without_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("the character U+0000 cannot be stored")
    return value


def integral(value: Any) -> Any:
    """7.0 as the integer 7, as JSON Schema has it; nothing else becomes an integer."""
    return int(value) if type(value) is float and value.is_integer() else value


# An integer of a request body: what JSON Schema calls one (7 or 7.0), not a bool or a
# string of digits, which a lax int would take.
Integer = Annotated[int, Strict(), BeforeValidator(integral)]

# A string field of a request body that is stored: refused (422, naming the field) when it
# holds U+0000, rather than by PostgreSQL as it is written.
# The pattern says so in the OpenAPI document; the validator names the field when refusing.
Text = Annotated[
    str, AfterValidator(_without_nul), Field(json_schema_extra={"pattern": TEXT_PATTERN})
]


def is_json_media_type(media_type: str | None) -> bool:
    """Whether data of this ``datacontenttype`` is JSON (CloudEvents: none means JSON)."""
    if media_type is None:
        return True
    essence = media_type.split(";", 1)[0].strip().lower()
    return essence.endswith("/json") or essence.endswith("+json")


# Not frozen: a frozen dataclass of this many fields takes three times as long to build,
# and ingest builds one per event on the hot path. Treat it as immutable.
@dataclass(slots=True)
class NewEvent:
    """One validated event, ready to append. ``ingest.binding`` builds these.

    ``has_data`` tells an absent ``data`` from an explicit JSON ``null``. ``time`` is the
    RFC 3339 text as sent; ``time_value`` the same instant to the microsecond, for filters.
    ``expected_version`` is an append condition, not content: 0 means the stream must not
    exist yet, N that it is at version N. ``numbers_normalised``: ``data`` went through
    ``normalise_numbers`` already (ingest does it as it reads the data), so the planner
    need not walk it again; an event built in code leaves it False.
    """

    id: str
    source: str
    type: str
    stream: str
    subject: str | None = None
    time: str | None = None
    time_value: datetime | None = None
    datacontenttype: str | None = None
    dataschema: str | None = None
    has_data: bool = False
    data: Any = None
    data_binary: bytes | None = None
    extensions: dict[str, Any] = field(default_factory=dict)
    causes: tuple[str, ...] = ()
    correlation_id: str | None = None
    model_name: str | None = None
    model_version: str | None = None
    model_signature: str | None = None
    expected_version: int | None = None
    numbers_normalised: bool = False


@dataclass(slots=True)  # one per appended event, built like NewEvent; treat as immutable
class Appended:
    """Where one event of an append landed. ``duplicate``: it was stored before."""

    id: str
    source: str
    stream: str
    stream_version: int
    position: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events a replay or listing returns; every field narrows, ``None`` is no limit."""

    after: int = 0
    types: tuple[str, ...] = ()
    stream: str | None = None
    source: str | None = None
    correlation_id: str | None = None
    model_name: str | None = None
    model_version: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    position_to: int | None = None
    from_version: int | None = None
    limit: int | None = None


def refuse_empty_filters(
    given: Mapping[str, str | Sequence[str] | None], *, named_as: str = "argument"
) -> None:
    """Raise ``BadRequest`` naming the filters of ``given`` (by the names the caller
    knows them by) that are there but empty: no stored event has an empty type, stream,
    source, correlation id or model (ingest refuses them), so such a filter would match
    nothing (empty types: everything). Most likely a value went missing. ``named_as`` is
    the problem's member naming the (first) filter at fault, empty or over its count:
    GraphQL's ``argument``, or ``parameter`` over HTTP."""
    empty = [
        name
        for name, value in given.items()
        if value is not None
        and (value == "" if isinstance(value, str) else not value or "" in value)
    ]
    if empty:
        refused = BadRequest(f"{', '.join(empty)} cannot be empty: leave a filter out to match any")
        refused.extensions[named_as] = empty[0]  # the first, as every problem names one
        raise refused
    refuse_long_filters(given, named_as=named_as)


# Values one filter may list: the statement holds one parameter per value, and building
# and planning one of 100,000 took minutes of the server's event loop.
MAX_FILTER_VALUES = 100


def refuse_long_filters(
    given: Mapping[str, str | Sequence[str] | None], *, named_as: str = "argument"
) -> None:
    """Raise ``BadRequest`` naming (in its member ``named_as``) a filter of ``given`` that
    lists more than ``MAX_FILTER_VALUES`` values."""
    for name, value in given.items():
        if value is not None and not isinstance(value, str) and len(value) > MAX_FILTER_VALUES:
            refused = BadRequest(
                f"{name} lists {len(value)} values, over the limit of {MAX_FILTER_VALUES}"
            )
            refused.extensions[named_as] = name
            raise refused


def normalise_numbers(value: Any) -> Any:
    """``value`` with integral numbers as ints; raises ``ValueError`` for a number outside
    the interoperable range. Stored this way, a number reads back from ``jsonb`` as the
    same Python value, which the hash chain relies on (``1.0`` and ``-0.0`` would not)."""
    if not needs_normalising(value):
        return value  # the usual case, found without rebuilding anything
    return _normalised(value)


def needs_normalising(value: Any) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is dict:
            pending.extend(item.values())
        elif kind is list:
            pending.extend(item)
        elif kind is float:
            if item.is_integer() or not -EXACT_LIMIT < item < EXACT_LIMIT:
                return True
        elif kind is int and not -EXACT_LIMIT < item < EXACT_LIMIT:
            return True
    return False


def _normalised(value: Any) -> Any:
    if isinstance(value, float):
        if not (-EXACT_LIMIT < value < EXACT_LIMIT):
            raise ValueError(f"number {value!r} is outside the I-JSON range ±(2**53 - 1)")
        return int(value) if value.is_integer() else value
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        if not -EXACT_LIMIT < value < EXACT_LIMIT:
            raise ValueError(f"number {value} is outside the I-JSON range ±(2**53 - 1)")
        return value
    if isinstance(value, dict):
        return {k: _normalised(v) for k, v in value.items()}
    return [_normalised(v) for v in value]


class StoredEvent(NamedTuple):
    """A stored event and its place in the chain. (A tuple, not a dataclass: walks build
    hundreds of these per answer, and a frozen dataclass takes three times as long.)"""

    record: ChainRecord
    prev_hash: bytes
    hash: bytes

    @property
    def position(self) -> int:
        return self.record.position

    def is_chained(self) -> bool:
        """Whether the stored hash matches the stored content and ``prev_hash``."""
        return seals(self.hash, self.prev_hash, self.record)
