"""The CloudEvents HTTP binding: request bytes in, validated ``NewEvent``s out.

The mode is chosen by Content-Type alone (binding spec §3; the Python SDK's habit of
guessing from ``ce-`` headers is not the rule):

- ``application/cloudevents-batch+json``: a JSON array of events (it may be empty);
- ``application/cloudevents+json``: one JSON object, extensions as top-level members;
- any other Content-Type, or none: binary mode, attributes in ``ce-*`` headers (percent-
  decoded exactly once, invalid UTF-8 refused), the body is ``data`` and the
  Content-Type is ``datacontenttype``.

Every problem in every event is collected, so one response names them all.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import unquote_to_bytes

import orjson

from app.errors import (
    AppError,
    EventTooLarge,
    InvalidCloudEvent,
    InvalidEvent,
    InvalidJSON,
    PayloadTooLarge,
    UnsupportedMediaType,
)
from app.store.records import (
    MAX_DATA_DEPTH,
    NewEvent,
    contains_nul,
    is_json_media_type,
    nests_deeper,
    normalise_numbers,
)
from app.web import json_text
from ingest.attributes import (
    EventProblems,
    Payload,
    Problem,
    build_event,
)
from ingest.limits import Limits

STRUCTURED = "application/cloudevents+json"
BATCH = "application/cloudevents-batch+json"
_NUL_ESCAPE = b"\\u0000"


def _may_nest_too_deep(encoded: bytes) -> bool:
    """False when the JSON text ``encoded`` has too few brackets to nest past the limit,
    which one count of each rules out for almost all data."""
    return encoded.count(b"[") + encoded.count(b"{") > MAX_DATA_DEPTH


# Events of a batch in one part of ``parse_in_parts``: about a millisecond of work.
PART_EVENTS = 64


def parse_request(
    content_type: str | None,
    headers: Sequence[tuple[bytes, bytes]],
    body: bytes,
    limits: Limits,
) -> list[NewEvent]:
    """The events of one request, in order. Raises an ``AppError``."""
    if not is_batch(content_type):
        return [parse_event(content_type, headers, body, limits)]
    return [e for part in parse_in_parts(content_type, headers, body, limits) for e in part]


def is_batch(content_type: str | None) -> bool:
    """Whether a request of this Content-Type is a batch (or meant to be one)."""
    return _essence(content_type).startswith("application/cloudevents-batch")


def _essence(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def parse_in_parts(
    content_type: str | None,
    headers: Sequence[tuple[bytes, bytes]],
    body: bytes,
    limits: Limits,
) -> Iterator[list[NewEvent]]:
    """``parse_request``'s events in parts of ``PART_EVENTS``, built as they are asked
    for, so that a server can run other tasks between parts: the events of a large batch
    take milliseconds to build, and an append holding the log head should not wait for
    them. An ``AppError`` may come after some parts; it refuses the whole request."""
    if not is_batch(content_type):
        yield [parse_event(content_type, headers, body, limits)]
        return
    essence = _essence(content_type)
    if essence != BATCH:
        raise UnsupportedMediaType(f"batch format {essence!r} is not supported; use {BATCH}")
    if content_type is not None and ";" in content_type:
        json_text.refuse_other_charsets(content_type)
    yield from _parse_batch(body, limits)


def parse_event(
    content_type: str | None,
    headers: Sequence[tuple[bytes, bytes]],
    body: bytes,
    limits: Limits,
) -> NewEvent:
    """The event of a request in structured or binary mode (``is_batch`` is False)."""
    essence = _essence(content_type)
    binary = not essence.startswith("application/cloudevents")
    try:
        if binary:
            return _from_binary(content_type, headers, body, limits)
        if essence != STRUCTURED:
            raise UnsupportedMediaType(
                f"event format {essence!r} is not supported; use {STRUCTURED}"
            )
        if content_type is not None and ";" in content_type:
            json_text.refuse_other_charsets(content_type)
        _refuse_past_one_event(body, limits)
        document = _load_json(body, "the body")
        if not isinstance(document, dict):
            raise InvalidCloudEvent("a structured event must be a JSON object")
        return _from_json(0, document, _NUL_ESCAPE in body, limits)
    except EventProblems as exc:
        raise _as_error(exc.problems, batch=False, binary=binary) from None


def _parse_batch(body: bytes, limits: Limits) -> Iterator[list[NewEvent]]:
    """The batch's events in parts; once an event has a problem, empty parts (the caller
    still runs other tasks between them) and at the end the error naming every one."""
    may_have_nul = _NUL_ESCAPE in body  # scanned once: a U+0000 is rare, and costly to seek
    problems: list[Problem] = []
    part: list[NewEvent] = []
    for index, item in enumerate(_batch_items(body, limits)):
        try:
            if not isinstance(item, dict):
                detail = "each batch item must be a JSON object"
                raise EventProblems([Problem(InvalidCloudEvent, index, "", detail)])
            part.append(_from_json(index, item, may_have_nul, limits))
        except EventProblems as exc:
            problems.extend(exc.problems)
        if len(part) == PART_EVENTS or (problems and index % PART_EVENTS == PART_EVENTS - 1):
            yield [] if problems else part  # every problem is named; no event is handed out
            part = []
    if problems:
        raise _as_error(problems, batch=True)
    if part:
        yield part


def _batch_items(body: bytes, limits: Limits) -> Iterator[Any]:
    """The items of a batch's JSON array: read at once (orjson) up to ``WHOLE_BYTES``,
    past it an item at a time (``json_text.array_items``), so that reading a large batch
    does not hold the event loop."""
    if len(body) > json_text.WHOLE_BYTES and json_text.is_array(body):
        for count, item in enumerate(json_text.array_items(body), start=1):
            if count > limits.max_batch_events:
                raise PayloadTooLarge(
                    f"the batch has more than {limits.max_batch_events} events, the limit",
                    limit="max_batch_events",
                )
            yield item
        return
    document = _load_json(body, "the body")
    if not isinstance(document, list):
        raise InvalidCloudEvent("a batch must be a JSON array of events")
    if len(document) > limits.max_batch_events:
        raise PayloadTooLarge(
            f"the batch has {len(document)} events, over the limit of {limits.max_batch_events} "
            f"by {len(document) - limits.max_batch_events}",
            limit="max_batch_events",
        )
    yield from document


def _refuse_past_one_event(body: bytes, limits: Limits) -> None:
    """Refuse, before reading it, a one-event body past what one event may take as sent:
    data of ``max_event_data_bytes`` four times over (base64 is 4/3 of it, and room for
    white space), attributes six times over (each character an escape). orjson reads a
    body in one call, and 16 MiB held the event loop. JSON indented past that (small
    values nested deep) is refused here though its data is within the limit compact: a
    batch, read an item at a time, takes it."""
    most = 4 * limits.max_event_data_bytes + 6 * limits.max_attributes_bytes + 4096
    if len(body) > most:
        raise EventTooLarge(
            f"the event's body is {len(body)} bytes, over the {most} one event's body may "
            f"take as sent (CAUSEWAY_MAX_EVENT_DATA_BYTES four times over, with the "
            "attributes'): send its JSON compact, or as a batch of one",
            limit="max_event_data_bytes",
        )


def _as_error(problems: list[Problem], *, batch: bool, binary: bool = False) -> AppError:
    kind = problems[0].kind
    first = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    where = f"event {first.index}: " if batch else ""
    members = [_member(p, f"#/{p.index}" if batch else None if binary else "#") for p in problems]
    return kind(f"{where}{first.detail}{more}", errors=members)


def _member(problem: Problem, within: str | None) -> dict[str, Any]:
    """A problem as a member of the answer's ``errors``. ``within``: the JSON Pointer of
    its event in the body (``#/3`` in a batch, ``#`` for a structured event), or None for
    an event that is no JSON document (binary mode: headers and a body): no pointer."""
    member: dict[str, Any] = {"index": problem.index, "attribute": problem.attribute}
    if within is not None:
        step = problem.attribute.replace("~", "~0").replace("/", "~1")  # RFC 6901
        member["pointer"] = f"{within}/{step}" if problem.attribute else within
    member["detail"] = problem.detail
    return member


def _from_json(index: int, item: dict[str, Any], may_have_nul: bool, limits: Limits) -> NewEvent:
    has_data = "data" in item
    encoded = item.get("data_base64")
    if has_data and encoded is not None:
        raise EventProblems(
            [
                Problem(
                    InvalidCloudEvent, index, "data", "data and data_base64 are mutually exclusive"
                )
            ]
        )
    if encoded is not None:
        try:
            raw = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else None
        except (binascii.Error, ValueError):
            raw = None
        if raw is None:
            raise EventProblems(
                [
                    Problem(
                        InvalidCloudEvent, index, "data_base64", "data_base64 is not valid base64"
                    )
                ]
            )
        # Measured as sent, JSON or not: they are stored as sent (white space and all), and
        # the limit bounds what the log holds.
        payload = Payload(present=True, binary=raw, size_bytes=len(raw))
    elif has_data:
        raw = item["data"]
        try:
            encoded = orjson.dumps(raw)
        except TypeError:  # past orjson's own 254 levels
            raise EventProblems([_too_deep(index)]) from None
        # Its own encoding (made for its size anyway) says whether this event's data may
        # nest too deep: a batch's body has a brace per event.
        value = _storable(index, raw, may_have_nul, _may_nest_too_deep(encoded))
        size = _data_size(value, encoded if value is raw else None, item.get("datacontenttype"))
        payload = Payload(present=True, value=value, size_bytes=size)
    else:
        payload = Payload()
    return build_event(index, item, payload, limits, binary=False)


def _data_size(value: Any, encoded: bytes | None, media_type: Any) -> int:
    """The size of ``data`` as CAUSEWAY_MAX_EVENT_DATA_BYTES counts it: text of a type
    that is not JSON is its UTF-8 bytes, as a binary-mode body of it is (its JSON string's
    quotes and escapes are not the text's), so that every mode takes the same text and a
    re-send in another mode is a duplicate (the store's ``_equivalent_form`` reads them
    alike); any other value is its compact JSON (``encoded``, when already made)."""
    if type(value) is str and isinstance(media_type, str) and not is_json_media_type(media_type):
        return len(value.encode())
    return len(encoded if encoded is not None else orjson.dumps(value))


def _from_binary(
    content_type: str | None,
    headers: Sequence[tuple[bytes, bytes]],
    body: bytes,
    limits: Limits,
) -> NewEvent:
    attributes: dict[str, Any] = {}
    problems: list[Problem] = []
    for raw_name, raw_value in headers:
        name = raw_name.decode("latin-1").lower()
        if not name.startswith("ce-"):
            continue
        attribute = name[3:]
        if attribute in attributes:
            problems.append(_header_problem(attribute, f"header {name} appears more than once"))
            continue
        if attribute in ("data", "data_base64"):
            problems.append(
                _header_problem(attribute, f"{name} is not an attribute: the body is data")
            )
            continue
        try:
            attributes[attribute] = _decode_header(raw_value)
        except ValueError as exc:
            problems.append(_header_problem(attribute, f"header {name}: {exc}"))
    if not attributes and not problems:
        raise UnsupportedMediaType(
            f"Content-Type {content_type or '(none)'!r} is not a CloudEvents format and the "
            f"request has no ce-* headers; send {STRUCTURED}, {BATCH}, or binary mode with ce-*"
        )
    if "datacontenttype" in attributes:
        problems.append(
            _header_problem(
                "datacontenttype",
                "ce-datacontenttype must not be sent in binary mode; Content-Type is the "
                "datacontenttype",
            )
        )
        del attributes["datacontenttype"]
    if problems:
        raise EventProblems(problems)
    if content_type:
        attributes["datacontenttype"] = content_type
    if not body:
        payload = Payload()
    elif content_type and is_json_media_type(content_type):
        if ";" in content_type:
            json_text.refuse_other_charsets(content_type)
        _refuse_past_one_event(body, limits)
        value = _storable(
            0,
            _load_json(body, "the body (datacontenttype is JSON)", event=True),
            _NUL_ESCAPE in body,
            _may_nest_too_deep(body),  # the body is the data
        )
        # Measured as structured mode measures it, compact: not the body's white space.
        payload = Payload(present=True, value=value, size_bytes=len(orjson.dumps(value)))
    else:
        payload = Payload(present=True, binary=body, size_bytes=len(body))
    return build_event(0, attributes, payload, limits, binary=True)


def _header_problem(attribute: str, detail: str) -> Problem:
    return Problem(InvalidCloudEvent, 0, attribute, detail)


_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _decode_header(raw: bytes) -> str:
    """RFC 7230 quoted-string unescaping, then one round of percent-decoding to UTF-8."""
    if any(b < 0x20 or b > 0x7E for b in raw.replace(b"\t", b" ")):
        raise ValueError("characters outside printable ASCII must be percent-encoded")
    text = raw.decode("ascii").strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        inner, out, escaped = text[1:-1], [], False
        for ch in inner:
            if escaped or ch != "\\":
                out.append(ch)
                escaped = False
            else:
                escaped = True
        text = "".join(out)
    if "%" in text and _BAD_PERCENT.search(text):
        raise ValueError(
            "a '%' is not followed by two hexadecimal digits (percent-encode '%' as %25)"
        )
    try:
        return unquote_to_bytes(text).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError("percent-encoding decodes to invalid UTF-8") from exc


def _load_json(body: bytes, what: str, *, event: bool = False) -> Any:
    """``body`` read by the one rule for JSON (``app.web.json_text``): an ``InvalidJSON``
    when it is not JSON or names a member twice; in binary mode, as a problem of the
    event's data."""
    try:
        return json_text.loads(body, what)
    except InvalidJSON as exc:
        if event:
            raise EventProblems([Problem(InvalidJSON, 0, "data", exc.detail)]) from None
        raise


def _storable(index: int, value: Any, may_have_nul: bool, may_be_deep: bool) -> Any:
    """JSON data as it will be stored, or the problem that keeps it out of ``jsonb``."""
    if may_be_deep and nests_deeper(value):
        raise EventProblems([_too_deep(index)])
    if may_have_nul and contains_nul(value):
        raise EventProblems(
            [Problem(InvalidEvent, index, "data", "data contains U+0000, which cannot be stored")]
        )
    try:
        return normalise_numbers(value)
    except ValueError as exc:
        raise EventProblems([Problem(InvalidEvent, index, "data", f"data: {exc}")]) from exc


def _too_deep(index: int) -> Problem:
    detail = f"data nests arrays and objects more than {MAX_DATA_DEPTH} levels deep"
    return Problem(InvalidEvent, index, "data", detail)
