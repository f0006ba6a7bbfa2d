"""Planning one group of appends in memory, before it is written: on the head and the
stored facts read under the log's lock (``log.append_on``), or on what an appender knows
of the log's tail (``tail_cache.TailCache``), in which case ``causeway_append`` checks the head when
it writes.

Requests are planned in order against the stored state plus what earlier requests of the
group add. Each request is all-or-nothing: its changes go to an overlay that joins the
group only when the whole request passes, so an error in one request never touches the
others (no savepoints needed). Hashes are chained in the same pass.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson

from app.errors import AppError, IdConflict, InvalidEvent, UnknownCause, VersionConflict
from app.store.chain import Content, encode
from app.store.model_registry import REGISTERED, Registration, output_violation, registration_from
from app.store.records import (
    RESERVED_TYPE_PREFIX,
    Appended,
    NewEvent,
    is_json_media_type,
    needs_normalising,
    normalise_numbers,
)

Key = tuple[str, str]  # (tenant, id or stream)
ModelKey = tuple[str, str, str]  # (tenant, model name, version)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Head(NamedTuple):
    """Where the log ends: the last event's position (0 for none) and its hash."""

    position: int
    hash: bytes


@dataclass(slots=True)
class StoredFacts:
    """What a group's planning reads of the stored log, besides the head: stream
    versions, the positions of ids (causes, or events re-sent), registered models."""

    versions: dict[Key, int] = field(default_factory=dict)
    positions: dict[Key, int] = field(default_factory=dict)
    registrations: dict[ModelKey, Registration] = field(default_factory=dict)


class SeenEvent(NamedTuple):
    """An event already stored (its record), or accepted earlier in the group (its
    ``NewEvent``): what a re-send of its id is compared with."""

    position: int
    stream_version: int
    content: Content


class Row(NamedTuple):
    """One event to write, where it goes, and the hashes around it. (Tuples, not
    dataclasses: one of each is built per event, inside the section that holds the log.)
    ``canonical``: the encoding ``hash`` covers, kept for a group that may be moved onto
    another head as it is written (``GroupPlan(keep_canonical=True)``)."""

    event: NewEvent
    tenant: str
    position: int
    stream_version: int
    prev_hash: bytes
    hash: bytes
    canonical: bytes | None = None


@dataclass(slots=True)
class _Overlay:
    """One request's additions to a group, consulted before the group's own and merged
    into it only when the whole request is accepted; and what refused its events."""

    position: int
    prev_hash: bytes
    known: dict[Key, SeenEvent] = field(default_factory=dict)
    positions: dict[Key, int] = field(default_factory=dict)
    versions: dict[Key, int] = field(default_factory=dict)
    registrations: dict[ModelKey, Registration] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    edges: list[tuple[int, int]] = field(default_factory=list)
    outcomes: list[Appended] = field(default_factory=list)
    id_errors: list[dict[str, Any]] = field(default_factory=list)
    cause_errors: list[dict[str, Any]] = field(default_factory=list)
    model_errors: list[dict[str, Any]] = field(default_factory=list)
    refused: set[str] = field(default_factory=set)  # ids of the request's events refused

    def refusal(self) -> AppError | None:
        """Why the request is refused, if it is. An event refused is not there to be a
        cause: a later event naming it is refused only because of that, and its own entry
        would name no mistake of its own. So unknown causes come last."""
        if self.id_errors:
            return IdConflict(_summary(self.id_errors), errors=self.id_errors)
        if self.model_errors:
            return InvalidEvent(_summary(self.model_errors), errors=self.model_errors)
        if self.cause_errors:
            return UnknownCause(_summary(self.cause_errors), errors=self.cause_errors)
        return None


class GroupPlan:
    """One group's plan, on the head at ``position`` (whose hash is ``prev_hash``).

    The maps given are the group's to keep and grow: each request that passes adds its
    events' ids, positions and stream versions, and its registrations, to them (the
    append's own lookups, or an appender's ``TailCache``, which then knows them for the next
    group). ``known`` are the events a re-sent id is compared with."""

    def __init__(
        self,
        position: int,
        prev_hash: bytes,
        known: dict[Key, SeenEvent],
        positions: dict[Key, int],
        versions: dict[Key, int],
        recorded_at: datetime,
        registrations: dict[ModelKey, Registration],
        *,
        keep_canonical: bool = False,
    ) -> None:
        self.position = position
        self.prev_hash = prev_hash
        self.rows: list[Row] = []
        self.edges: list[tuple[int, int]] = []  # (effect, cause)
        self.known = known
        self.positions = positions
        self.versions = versions
        self.recorded_at = recorded_at
        self.registrations = registrations
        self.keep_canonical = keep_canonical

    def plan(self, tenant: str, batch: Sequence[NewEvent]) -> list[Appended] | AppError:
        """Add ``batch`` to the group, or return why it cannot be (adding nothing)."""
        if any(_to_normalise(event) for event in batch):
            # Built in code rather than ingested (a registration, a route): numbers that
            # jsonb would read back otherwise (-0.0, 1e16) would break the chain. Before
            # anything is compared: a re-send is compared as the first was stored.
            normalised = _normalised(batch)
            if isinstance(normalised, AppError):
                return normalised
            batch = normalised
        if len(batch) == 1:
            alone = self._accept_alone(tenant, batch[0])
            if alone is not None:
                return alone
        request = _Overlay(self.position, self.prev_hash)
        for index, event in enumerate(batch):
            key = (tenant, event.id)
            if self._is_seen(request, tenant, batch, index, key):
                continue
            cause_positions = self._cause_positions(request, tenant, index, event)
            if cause_positions is None or self._is_unfit(request, tenant, index, event):
                request.refused.add(event.id)
                continue
            stream = (tenant, event.stream)
            actual = request.versions.get(stream) or self.versions.get(stream, 0)
            if event.expected_version is not None and event.expected_version != actual:
                if request.refusal() is not None:
                    # An event before it was refused, and did not move the stream: the
                    # refusal names what is wrong, not a version the sender counted right.
                    request.refused.add(event.id)
                    continue
                return VersionConflict(
                    f"stream {event.stream!r} is at version {actual}, not {event.expected_version}",
                    stream=event.stream,
                    expected=event.expected_version,
                    actual=actual,
                    index=index,
                )
            position = request.position + 1
            version = actual + 1
            row = self._chained(event, tenant, position, version, request.prev_hash)
            request.rows.append(row)
            # One edge per cause, however often an event built in code names it.
            request.edges.extend([(position, cause) for cause in dict.fromkeys(cause_positions)])
            request.position, request.prev_hash = position, row.hash
            request.versions[stream] = version
            request.known[key] = SeenEvent(position, version, event)
            request.positions[key] = position
            request.outcomes.append(
                Appended(event.id, event.source, event.stream, version, position, False)
            )
        refusal = request.refusal()
        if refusal is not None:
            return refusal
        self._merge(request)
        return request.outcomes

    def _is_seen(
        self, request: _Overlay, tenant: str, batch: Sequence[NewEvent], index: int, key: Key
    ) -> bool:
        """Whether ``batch[index]``'s id is stored or earlier in the group: a re-send of
        the same event is answered as a duplicate, another event with that id refused
        (named as a duplicate in the batch when it is one)."""
        event = batch[index]
        in_batch = request.known.get(key)
        earlier = in_batch or self.known.get(key)
        if earlier is None:
            return False
        problem = _compare(event, tenant, earlier.content)
        if problem is not None:
            if in_batch is not None:
                same = [i for i in range(index) if batch[i].id == event.id]
                first = next((i for i in same if batch[i] is in_batch.content), same[0])
                problem = (
                    f"id {event.id!r} is duplicated in the batch: events {first} and {index} "
                    "have it, with other content"
                )
            request.id_errors.append({"index": index, "attribute": "id", "detail": problem})
            request.refused.add(event.id)
            return True
        request.outcomes.append(
            Appended(
                event.id,
                event.source,
                earlier.content.stream,
                earlier.stream_version,
                earlier.position,
                duplicate=True,
            )
        )
        return True

    def _cause_positions(
        self, request: _Overlay, tenant: str, index: int, event: NewEvent
    ) -> list[int] | None:
        """The positions of ``event``'s causes; None when one is neither stored nor earlier
        in the group (the event is refused)."""
        found_positions = []
        missing = []
        for cause in event.causes:
            found = request.positions.get((tenant, cause)) or self.positions.get((tenant, cause))
            if found is None:
                missing.append(cause)
            else:
                found_positions.append(found)
        if not missing:
            return found_positions
        # A cause refused above is that event's problem, not this one's.
        unknown = [cause for cause in missing if cause not in request.refused]
        if unknown:
            request.cause_errors.append(
                {
                    "index": index,
                    "attribute": "causationid",
                    "detail": f"unknown cause ids: {', '.join(unknown)}",
                    "missing": unknown,
                }
            )
        return None

    def _is_unfit(self, request: _Overlay, tenant: str, index: int, event: NewEvent) -> bool:
        """Whether ``event`` names a model version it does not fit (unregistered, or its
        output breaks the signature); a registration is noted for the events after it."""
        if event.model_name is None or event.model_version is None:
            return False
        model = (tenant, event.model_name, event.model_version)
        if event.type == REGISTERED:
            request.registrations[model] = registration_from(
                event.data, event.model_signature or ""
            )
            return False
        unfit = _model_problem(
            event, request.registrations.get(model) or self.registrations.get(model)
        )
        if unfit is None:
            return False
        request.model_errors.append({"index": index, **unfit})
        return True

    def _merge(self, request: _Overlay) -> None:
        """Take an accepted request's additions into the group."""
        self.registrations.update(request.registrations)
        self.known.update(request.known)
        self.positions.update(request.positions)
        self.versions.update(request.versions)
        self.rows.extend(request.rows)
        self.edges.extend(request.edges)
        self.position, self.prev_hash = request.position, request.prev_hash

    def _accept_alone(self, tenant: str, event: NewEvent) -> list[Appended] | None:
        """``plan`` for a request of one event that breaks no rule: the usual request,
        planned without the overlay a request of several events needs (with one event,
        nothing is added before every check has passed). None, having added nothing,
        when ``plan``'s full path must decide: the id is known (a re-send, or a
        conflict), or the event is refused, which that path explains."""
        key = (tenant, event.id)
        if key in self.known:
            return None
        positions = self.positions
        cause_positions = []
        for cause in event.causes:
            found = positions.get((tenant, cause))
            if found is None:
                return None
            cause_positions.append(found)
        registered: tuple[ModelKey, Registration] | None = None
        if event.model_name is not None and event.model_version is not None:
            model = (tenant, event.model_name, event.model_version)
            if event.type == REGISTERED:
                registered = (model, registration_from(event.data, event.model_signature or ""))
            elif _model_problem(event, self.registrations.get(model)) is not None:
                return None
        stream = (tenant, event.stream)
        actual = self.versions.get(stream, 0)
        if event.expected_version is not None and event.expected_version != actual:
            return None
        if _to_normalise(event):
            return None
        position, version = self.position + 1, actual + 1
        row = self._chained(event, tenant, position, version, self.prev_hash)
        self.rows.append(row)
        if cause_positions:
            self.edges.extend([(position, cause) for cause in dict.fromkeys(cause_positions)])
        self.versions[stream] = version
        self.known[key] = SeenEvent(position, version, event)
        positions[key] = position
        if registered is not None:
            self.registrations[registered[0]] = registered[1]
        self.position, self.prev_hash = position, row.hash
        return [Appended(event.id, event.source, event.stream, version, position, False)]

    def _chained(
        self, event: NewEvent, tenant: str, position: int, version: int, prev_hash: bytes
    ) -> Row:
        """``event`` at ``position``, its hash linked to ``prev_hash``."""
        canonical = encode(event, tenant, position, version, self.recorded_at)
        return Row(
            event,
            tenant,
            position,
            version,
            prev_hash,
            hashlib.sha256(prev_hash + canonical).digest(),
            canonical if self.keep_canonical else None,
        )


def _normalised(batch: Sequence[NewEvent]) -> list[NewEvent] | AppError:
    """``batch`` with the numbers of each event built in code normalised (``_to_normalise``),
    or why one cannot be (a number out of the interoperable range)."""
    found: list[NewEvent] = []
    for index, event in enumerate(batch):
        if _to_normalise(event):
            try:
                event = replace(event, data=normalise_numbers(event.data))
            except ValueError as exc:
                return InvalidEvent(f"event {index}: {exc}", index=index, attribute="data")
        found.append(event)
    return found


def _to_normalise(event: NewEvent) -> bool:
    """Whether ``event``'s JSON data has numbers ``jsonb`` would read back otherwise (-0.0,
    1e16): an event built in code, whose data ingest did not already normalise."""
    return (
        event.has_data
        and event.data_binary is None
        and not event.numbers_normalised
        and needs_normalising(event.data)
    )


def _compare(event: NewEvent, tenant: str, stored: Content) -> str | None:
    """None when ``event`` is a re-send of ``stored``, else why it conflicts."""
    if event.source != stored.source:
        return f"id {event.id!r} is already used by source {stored.source!r}"
    # Everything but where the store put it: position, stream version, recorded time.
    if encode(event, tenant, 0, 0, _EPOCH) != encode(stored, tenant, 0, 0, _EPOCH) and (
        _equivalent_form(event) != _equivalent_form(stored)
    ):
        return f"event {event.source!r}/{event.id!r} was stored before with other content"
    return None


def _equivalent_form(content: Content) -> tuple[Any, ...]:
    """What two encodings of one CloudEvent share, so that a producer that sends it again
    in another content mode (or through another SDK) gets a duplicate, not a conflict:
    JSON data with no ``datacontenttype`` is ``application/json`` data; text data of a
    non-JSON type is the same whether it came as a JSON string (structured mode) or as
    bytes (binary mode); data of a JSON type sent as bytes (``data_base64``, a binary-mode
    body) is the JSON it holds, as ``data`` would have sent it; and an extension is its
    canonical string (binary mode's headers carry no types, so an integer 5 comes back as
    "5"). Media types compare as ``_media_type_form`` gives them."""
    media_type = content.datacontenttype
    data: tuple[str, Any] | None = None
    if content.data_binary is not None:
        data = ("bytes", content.data_binary)
        if media_type is not None and is_json_media_type(media_type):
            # JSON sent as bytes (data_base64, or a binary-mode body) is the JSON it holds,
            # its numbers as data's are stored (1.0 is 1). Bytes that do not read back as
            # such (not JSON, nested past what orjson writes, a number out of range) stay
            # bytes, compared as they are.
            with contextlib.suppress(orjson.JSONDecodeError, TypeError, ValueError):
                value = normalise_numbers(orjson.loads(content.data_binary))
                data = ("json", orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
    elif content.has_data:
        if media_type is None:
            media_type = "application/json"
        if isinstance(content.data, str) and not is_json_media_type(media_type):
            data = ("bytes", content.data.encode())
        else:
            data = ("json", orjson.dumps(content.data, option=orjson.OPT_SORT_KEYS))
    return (
        content.id, content.source, content.type, content.subject, content.time,
        content.stream, _media_type_form(media_type), content.dataschema, data,
        sorted((k, _canonical_string(v)) for k, v in content.extensions.items()),
        tuple(content.causes), content.correlation_id, content.model_name,
        content.model_version, content.model_signature,
    )  # fmt: skip


def _media_type_form(media_type: str | None) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """What a media type says (RFC 9110, 8.3.1): its type and subtype and its parameter
    names case-insensitive, parameters in any order, a value quoted or not, a charset
    named in any case; JSON is UTF-8 whether it says so or not (RFC 8259, 8.1). So a
    re-send in binary mode whose Content-Type adds ``; charset=utf-8`` is a duplicate."""
    if media_type is None:
        return None
    essence, *pairs = media_type.split(";")
    parameters = []
    for pair in pairs:
        name, _, value = pair.partition("=")
        name, value = name.strip().lower(), value.strip()
        if not name:
            continue  # an empty parameter (RFC 9110, 5.6.6: "a/b;") says nothing
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        if name == "charset":
            value = value.lower()
            if is_json_media_type(essence) and value in ("utf-8", "utf8"):
                continue
        parameters.append((name, value))
    return essence.strip().lower(), tuple(sorted(parameters))


def _canonical_string(value: Any) -> str:
    """A CloudEvents attribute value's canonical string (spec.md, "Type System")."""
    if value is True or value is False:
        return "true" if value else "false"
    return str(value)


def _model_problem(event: NewEvent, registered: Registration | None) -> dict[str, Any] | None:
    """Why an event naming a model version breaks the registry, or None."""
    if registered is None:
        return {
            "attribute": "modelversion",
            "detail": f"model {event.model_name!r} version {event.model_version!r} is not registered",
        }
    if event.model_signature is not None and event.model_signature != registered.digest:
        return {
            "attribute": "modelsig",
            "detail": f"signature mismatch: the event names {event.model_signature}, "
            f"the registered signature is {registered.digest}",
            "registered": registered.digest,
        }
    # Causeway's own events that name a version (a rollout of it) carry no model output.
    if registered.enforce_outputs and not event.type.startswith(RESERVED_TYPE_PREFIX):
        violation = output_violation(registered, _outputs_of(event))
        if violation is not None:
            field, why = violation
            return {"attribute": f"data.{field}" if field else "data", "detail": why}
    return None


def _outputs_of(event: NewEvent) -> Any:
    """The data an output check reads: JSON data (sent as bytes too: decoded); as bytes,
    data that is not JSON (sent as bytes or, text, as a JSON string: taken alike) or does
    not parse as JSON; None for no data."""
    if event.data_binary is None:
        if not event.has_data:
            return None
        if isinstance(event.data, str) and not is_json_media_type(event.datacontenttype):
            return event.data.encode()
        return event.data
    if not is_json_media_type(event.datacontenttype):
        return event.data_binary
    try:
        return orjson.loads(event.data_binary)
    except orjson.JSONDecodeError:
        return event.data_binary


def _summary(errors: list[dict[str, Any]]) -> str:
    first = errors[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"event {first['index']}: {first['detail']}{more}"
