"""Routes: which events become which tasks.

A route is defined by a ``causeway.route.defined`` event (and removed by
``causeway.route.deleted``), so the routing table is itself a projection of the log and
an event is routed by the routes that existed at its position, on every rebuild alike.

A route matches an event by type (exact, or a prefix ending in ``*``) and by predicates on
its attributes. A predicate names an attribute: an extension of that name, else a
top-level field of the event's JSON ``data`` (``ext.NAME`` or ``data.NAME`` pick one). It is
written as text: ``device_type=light`` (or ``!=``), ``room in (bedroom, kitchen)``,
``user_id exists`` (or ``not exists``). Values compare as text: ``true``/``false`` for
booleans, the JSON spelling for numbers."""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson

from app.errors import BadRequest
from app.store.chain import ChainRecord
from app.store.deployments import SOURCE as DEPLOYMENTS_SOURCE
from app.store.records import EXACT_LIMIT, NewEvent, contains_nul, integral
from app.store.timestamps import parse_rfc3339

PREFIX = "causeway.route."
DEFINED = PREFIX + "defined"
DELETED = PREFIX + "deleted"
TYPES = frozenset({DEFINED, DELETED})
SOURCE = "causeway:scheduler"

ON_MODEL_MISMATCH = ("propose", "rollback")
# Not "." or "..": clients remove such a segment from a path (RFC 3986, 5.2.4), so a queue
# of that name could never be leased from, nor a route of that id read or deleted.
# (Written without a look-ahead, which pydantic's regex engine lacks.)
NAME_PATTERN = r"^(?:[A-Za-z0-9_\-][A-Za-z0-9_.\-]?|\.[A-Za-z0-9_\-]|[A-Za-z0-9_.\-]{3,128})$"
NAME = re.compile(NAME_PATTERN.removesuffix("$") + r"\Z")  # a route's id, a queue's name
ATTRIBUTE = r"(?:(?:ext|data)\.)?[A-Za-z0-9_\-]{1,128}"
_ATTRIBUTE = ATTRIBUTE
# The value starts past the blanks (line ends too) after the operator and runs to the end
# of its line, stripped after the match; neither part is matched again (atomic and
# possessive): a lazy value before `\s*$` scanned the blanks again at every step (30 KB
# of blanks: 5 s).
_EQUALS = re.compile(rf"^\s*({_ATTRIBUTE})\s*(=|!=)(?>\s*)([^\n]*+)\s*\Z")
_IN = re.compile(rf"^\s*({_ATTRIBUTE})\s+(not\s+in|in)\s*\((.*)\)\s*$", re.IGNORECASE)
_EXISTS = re.compile(rf"^\s*({_ATTRIBUTE})\s+(not\s+exists|exists)\s*$", re.IGNORECASE)
# What the scheduler writes never triggers a route, so no route can feed itself.
UNROUTABLE = (
    "causeway.task.",
    "causeway.route.",
    "causeway.alert.",
    "causeway.queue.",
    "causeway.model.prewarm_requested",
)
_UNROUTABLE = UNROUTABLE
SCHEDULER_ACTOR = "scheduler"  # the actor of its own deployment commands (a key's: the key)
_KEYS = frozenset({"id", "types", "type", "where", "kind", "queue", "priority", "requires",
                   "debounce", "max_retries", "backoff_base_s", "service",
                   "on_model_mismatch", "prewarm"})  # fmt: skip


@dataclass(frozen=True, slots=True)
class Predicate:
    attribute: str
    op: Literal["eq", "ne", "in", "not_in", "exists", "not_exists"]
    values: tuple[str, ...] = ()

    def holds(self, record: ChainRecord) -> bool:
        found, value = _lookup(record, self.attribute)
        match self.op:
            case "exists":
                return found
            case "not_exists":
                return not found
            case "eq" | "in":
                return found and _text(value) in self.values
            case "ne" | "not_in":
                return not found or _text(value) not in self.values

    def describe(self) -> str:
        match self.op:
            case "eq":
                return f"{self.attribute}={self.values[0]}"
            case "ne":
                return f"{self.attribute}!={self.values[0]}"
            case "in" | "not_in":
                word = "in" if self.op == "in" else "not in"
                return f"{self.attribute} {word} ({', '.join(self.values)})"
            case "exists":
                return f"{self.attribute} exists"
            case "not_exists":
                return f"{self.attribute} not exists"


@dataclass(frozen=True, slots=True)
class Requirements:
    """What a worker must offer: ``numbers`` are minimums of the worker's capability of the
    same name (``model_size_gb`` counts against free ``gpu_memory_gb``), ``flags`` must be
    true in its profile, ``labels`` must equal its node labels."""

    numbers: dict[str, float]
    flags: tuple[str, ...]
    labels: dict[str, str]

    def as_json(self) -> dict[str, Any]:
        return {"numbers": self.numbers, "flags": list(self.flags), "labels": self.labels}

    def as_spec(self) -> dict[str, Any]:
        """The form a route is written in: ``{"gpu_memory_gb": 8, "fp16": true, ...}``."""
        return {
            **self.numbers,
            **dict.fromkeys(self.flags, True),
            **({"labels": self.labels} if self.labels else {}),
        }


@dataclass(frozen=True, slots=True)
class Prewarm:
    """After ``count`` matching events from one source within ``within_s``, ask for
    ``model`` to be loaded (``causeway.model.prewarm_requested``)."""

    model: str
    count: int
    within_s: float


@dataclass(frozen=True, slots=True)
class Route:
    id: str
    types: tuple[str, ...]
    where: tuple[Predicate, ...]
    kind: str | None
    queue: str | None
    priority: int | None  # None: the event's ``priority`` extension, else 5
    requires: Requirements
    debounce_key: str | None
    debounce_window_s: float
    max_retries: int
    backoff_base_s: float
    service: str | None
    on_model_mismatch: str
    prewarm: Prewarm | None

    @property
    def makes_tasks(self) -> bool:
        return self.kind is not None and self.queue is not None

    def matches(self, record: ChainRecord) -> bool:
        if record.source == SOURCE or record.type.startswith(_UNROUTABLE):
            return False
        if record.source == DEPLOYMENTS_SOURCE and isinstance(record.data, dict):
            # Its own rollback: a route of it whose tasks roll back on a mismatch rolled
            # the service back again at each, down through every stable version.
            return record.data.get("actor") != SCHEDULER_ACTOR and self._takes(record)
        return self._takes(record)

    def _takes(self, record: ChainRecord) -> bool:
        if not any(
            record.type.startswith(t[:-1]) if t.endswith("*") else record.type == t
            for t in self.types
        ):
            return False
        return all(p.holds(record) for p in self.where)

    def priority_for(self, record: ChainRecord) -> int:
        if self.priority is not None:
            return self.priority
        return _priority_of(record.extensions.get("priority"))

    def debounce_value(self, record: ChainRecord) -> str | None:
        if self.debounce_key is None:
            return None
        found, value = _lookup(record, self.debounce_key)
        return _text(value) if found else None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "types": list(self.types),
            "where": [p.describe() for p in self.where],
            "kind": self.kind,
            "queue": self.queue,
            "priority": self.priority,
            "requires": self.requires.as_spec(),
            "debounce": (
                {"key": self.debounce_key, "window_s": self.debounce_window_s}
                if self.debounce_key
                else None
            ),
            "max_retries": self.max_retries,
            "backoff_base_s": self.backoff_base_s,
            "service": self.service,
            "on_model_mismatch": self.on_model_mismatch,
            "prewarm": (
                {
                    "model": self.prewarm.model,
                    "count": self.prewarm.count,
                    "within_s": self.prewarm.within_s,
                }
                if self.prewarm
                else None
            ),
        }


def parse_route(spec: dict[str, Any]) -> Route:
    """A route from its JSON form (the body of ``POST /routes``); ``BadRequest`` names the
    first field that is wrong and why."""
    unknown = sorted(set(spec) - _KEYS)
    if unknown:
        raise BadRequest(f"unknown route field(s): {', '.join(unknown)}")
    if contains_nul(spec):
        raise BadRequest("a route cannot hold the character U+0000")
    route_id = _name(spec, "id", required=True)
    types = spec.get("types", spec.get("type"))
    if isinstance(types, str):
        types = [types]
    if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
        raise BadRequest(
            "types must be a non-empty list of event types ('prefix.*' matches a prefix)"
        )
    for t in types:
        if not t.strip("*") or t.startswith(_UNROUTABLE):
            raise BadRequest(f"type {t!r} cannot be routed")
    where = spec.get("where", [])
    if not isinstance(where, list) or not all(isinstance(w, str) for w in where):
        raise BadRequest("where must be a list of predicates such as 'room in (bedroom, kitchen)'")
    kind = _name(spec, "kind")
    queue = _name(spec, "queue")
    prewarm = _prewarm(spec.get("prewarm"))
    if (kind is None) != (queue is None):
        raise BadRequest("a route that makes tasks names both kind and queue")
    if kind is None and prewarm is None:
        raise BadRequest("a route makes tasks (kind and queue), asks for pre-warming, or both")
    priority = integral(spec.get("priority"))
    if priority is not None and (type(priority) is not int or not 0 <= priority <= 9):
        raise BadRequest("priority is an integer 0-9 (omit it to take the event's 'priority')")
    debounce = spec.get("debounce")
    debounce_key: str | None = None
    window_s = 0.0
    if debounce is not None:
        if (
            not isinstance(debounce, dict)
            or not isinstance(debounce.get("key"), str)
            or not debounce["key"]
            or set(debounce) - {"key", "window_s"}
        ):
            raise BadRequest("debounce is {'key': attribute, 'window_s': seconds}")
        debounce_key = debounce["key"]
        window_s = _number(debounce, "window_s", low=0.001, high=86_400.0)
    mismatch = spec.get("on_model_mismatch") or "propose"
    if mismatch not in ON_MODEL_MISMATCH:
        raise BadRequest("on_model_mismatch is 'propose' or 'rollback'")
    if mismatch == "rollback" and spec.get("service") is None:
        raise BadRequest("on_model_mismatch 'rollback' needs the deployment service to roll back")
    return Route(
        id=route_id or "",
        types=tuple(types),
        where=tuple(parse_predicate(w) for w in where),
        kind=kind,
        queue=queue,
        priority=priority,
        requires=_requirements(spec.get("requires", {})),
        debounce_key=debounce_key,
        debounce_window_s=window_s,
        max_retries=int(_number(spec, "max_retries", low=0, high=100, default=3, integer=True)),
        backoff_base_s=_number(spec, "backoff_base_s", low=0.0, high=3600.0, default=1.0),
        service=_name(spec, "service"),
        on_model_mismatch=mismatch,
        prewarm=prewarm,
    )


def parse_predicate(text: str) -> Predicate:
    if m := _IN.match(text):
        values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
        if not values:
            raise BadRequest(f"predicate {text!r} lists no values")
        if m.group(2).lower().startswith("not"):
            return Predicate(_prefix_folded(m.group(1)), "not_in", values)
        return Predicate(_prefix_folded(m.group(1)), "in", values)
    if m := _EXISTS.match(text):
        if m.group(2).lower().startswith("not"):
            return Predicate(_prefix_folded(m.group(1)), "not_exists")
        return Predicate(_prefix_folded(m.group(1)), "exists")
    if m := _EQUALS.match(text):
        value = m.group(3).strip()
        return Predicate(m.group(1), "eq" if m.group(2) == "=" else "ne", (value,))
    raise BadRequest(
        f"predicate {text!r} is not one of 'NAME=VALUE', 'NAME!=VALUE', "
        "'NAME in (A, B)', 'NAME exists', 'NAME not exists'"
    )


def _prefix_folded(attribute: str) -> str:
    """``attribute`` with its ``ext.`` or ``data.`` prefix in lower case, as ``_lookup``
    reads it: the ``in`` and ``exists`` forms match their keywords ignoring case, the
    prefix too, so ``DATA.room in (a)`` was taken and then matched nothing."""
    where, dot, name = attribute.partition(".")
    return f"{where.lower()}.{name}" if dot else attribute


def stream_of(route_id: str) -> str:
    return f"causeway:route:{route_id}"


def define_event(route: Route) -> NewEvent:
    return NewEvent(
        id=f"causeway:route:{route.id}:{uuid.uuid4().hex}",
        source=SOURCE,
        type=DEFINED,
        stream=stream_of(route.id),
        has_data=True,
        data=route.as_json(),
    )


def delete_event(route_id: str, *, reason: str | None, actor: str) -> NewEvent:
    return NewEvent(
        id=f"causeway:route:{route_id}:{uuid.uuid4().hex}",
        source=SOURCE,
        type=DELETED,
        stream=stream_of(route_id),
        has_data=True,
        data={"id": route_id, "reason": reason, "actor": actor},
    )


def event_time(record: ChainRecord) -> datetime:
    """When ``record`` happened: its ``time`` attribute, else when it was recorded."""
    if record.time is not None:
        value, _ = parse_rfc3339(record.time)
        if value is not None:
            return value
    return record.recorded_at


# The lineage extensions, which the store keeps in columns of their own, not among the
# other extensions: a route reads them by the names they were sent under.
_LINEAGE: dict[str, Callable[[ChainRecord], Any]] = {
    "correlationid": lambda r: r.correlation_id,
    "modelname": lambda r: r.model_name,
    "modelversion": lambda r: r.model_version,
    "modelsig": lambda r: r.model_signature,
    "causationid": lambda r: ",".join(r.causes) or None,
    "stream": lambda r: r.stream,
}


def _lookup(record: ChainRecord, attribute: str) -> tuple[bool, Any]:
    """An attribute's value: an extension, else a top-level field of the data, else a
    lineage extension. The lineage ones come last so that a bare name that reached a data
    field before they were read (``stream`` always has a value) still reaches it."""
    where, _, name = attribute.rpartition(".")
    if where in ("", "ext") and name in record.extensions:
        return True, record.extensions[name]
    if where in ("", "data") and isinstance(record.data, dict) and name in record.data:
        return True, record.data[name]
    if where in ("", "ext"):
        lineage = _LINEAGE.get(name)
        if lineage is not None and (value := lineage(record)) is not None:
            return True, value
    return False, None


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def _name(spec: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    value = spec.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not NAME.match(value):
        raise BadRequest(f"{key} must be 1-128 of letters, digits, '_', '.', '-'")
    return value


def _number(
    spec: dict[str, Any],
    key: str,
    *,
    low: float,
    high: float,
    default: float | None = None,
    integer: bool = False,
) -> float:
    value = integral(spec.get(key)) if integer else spec.get(key)
    if value is None:
        value = default
    is_number = isinstance(value, int) or (isinstance(value, float) and not integer)
    if isinstance(value, bool) or not isinstance(value, int | float) or not is_number:
        raise BadRequest(f"{key} must be a number from {low:g} to {high:g}")
    if not _is_finite(value) or not low <= value <= high:
        raise BadRequest(f"{key} must be a number from {low:g} to {high:g}")
    return float(value)


def _is_finite(value: float) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer past any float
        return False


def _requirements(raw: Any) -> Requirements:
    if not isinstance(raw, dict):
        raise BadRequest("requires is an object such as {'gpu_memory_gb': 8, 'fp16': true}")
    numbers: dict[str, float] = {}
    flags: list[str] = []
    labels: dict[str, str] = {}
    for key, value in raw.items():
        if key == "labels":
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise BadRequest("requires.labels maps node label names to text values")
            labels = dict(value)
        elif isinstance(value, bool):
            if value:
                flags.append(key)
        elif isinstance(value, int | float) and _is_finite(value) and 0 <= value < EXACT_LIMIT:
            numbers[key] = float(value)  # capabilities are within ±2**53, as stored JSON is
        else:
            raise BadRequest(
                f"requires.{key} must be true/false or a non-negative number below 2**53"
            )
    # The model has to fit in the free GPU memory a worker reports.
    if "model_size_gb" in numbers:
        size = numbers.pop("model_size_gb")
        numbers["gpu_memory_gb"] = max(numbers.get("gpu_memory_gb", 0.0), size)
    return Requirements(numbers, tuple(sorted(flags)), labels)


def _prewarm(raw: Any) -> Prewarm | None:
    if raw is None:
        return None
    if (
        not isinstance(raw, dict)
        or not isinstance(raw.get("model"), str)
        or not raw["model"]
        or set(raw) - {"model", "count", "within_s"}
    ):
        raise BadRequest("prewarm is {'model': name, 'count': N, 'within_s': seconds}")
    count = int(_number(raw, "count", low=1, high=10_000, integer=True))
    return Prewarm(raw["model"], count, _number(raw, "within_s", low=0.001, high=86_400.0))


def parse_new_route(spec: dict[str, Any]) -> Route:
    """``parse_route`` for a route being defined now, with the checks that came after
    routes were first stored (so that a stored route always reads back): the debounce
    key is an attribute as ``where`` names one, ``types`` and its alias ``type`` are not
    both given, and ``on_model_mismatch`` is a mode or null (``scheduler.web.routes``
    documents the body these checks accept)."""
    if "types" in spec and "type" in spec:
        raise BadRequest("give types or type, not both")
    if spec.get("on_model_mismatch") not in (None, *ON_MODEL_MISMATCH):
        raise BadRequest("on_model_mismatch is 'propose' or 'rollback'")
    debounce = spec.get("debounce")
    if isinstance(debounce, dict):
        key = debounce.get("key")
        if isinstance(key, str) and key and not re.fullmatch(_ATTRIBUTE, key):
            raise BadRequest(
                f"debounce.key {key!r} is not an attribute: NAME, ext.NAME or data.NAME"
            )
    return parse_route(spec)


def route_from_json(data: dict[str, Any]) -> Route:
    """A stored route (the data of its ``causeway.route.defined`` event): stored as
    ``Route.as_json`` writes it, which ``parse_route`` reads back to the same route."""
    return parse_route(data)


# A number as JSON writes one (an extension in binary mode is text: "9.0" and "1e1" are
# numbers, "1_0" and " 9" are not).
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")


def _priority_of(value: object) -> int:
    """An event's ``priority`` extension as a task's priority: a number (an integer, or
    text that is one) clamped to 0-9, its fraction dropped; 5 for anything else. ("9.0"
    was read as no number: guaranteed work went to spot workers.)"""
    if isinstance(value, bool):
        return 5
    if isinstance(value, int):
        number: float = value
    elif isinstance(value, str) and _NUMBER.match(value):
        number = float(value)  # 1e999: infinity, clamped to 9
    else:
        return 5
    return int(min(max(number, 0.0), 9.0))
