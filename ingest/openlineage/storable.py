"""What Causeway refuses of an OpenLineage event the spec's schema took, before anything
is appended (docs/openlineage.md): what the log cannot keep, and what ``POST /events``
refuses of a CloudEvent too.

- The event as a value: the character U+0000, JSON nested deeper than the log keeps, a
  number outside ±(2**53 - 1) (422 ``invalid-openlineage-event``, pointer ``#``);
  ``check_depth`` before the schema and ``check_value`` after it, before the event is
  parsed (parsing hashes it, which a value nested past orjson's limit would fail).
- An empty ``producer`` (the ``source``, which CloudEvents wants non-empty) or an empty
  job, dataset, input or output ``name`` (a ``subject``) (422
  ``invalid-openlineage-event``, naming the member), as ``POST /events`` refuses an
  empty ``source`` or ``subject``.
- A name the spec leaves unbounded but Causeway makes an attribute of (the stream, the
  ``source``, the ``subject``, the ``correlationid``), past ``max_attributes_bytes`` in
  UTF-8: the limit ``POST /events`` puts on an event's attributes, and what keeps each
  one within a PostgreSQL index entry (422 ``event-too-large``, naming the member).
- An ``eventTime`` more than ``max_future_s`` ahead of the server's clock, as ``POST
  /events`` refuses a ``time`` (422 ``time-in-future``, pointer ``#/eventTime``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from app.errors import EventTooLarge, InvalidOpenLineageEvent, TimeInFuture
from app.store.openlineage import dataset_stream, job_stream
from app.store.records import (
    MAX_DATA_DEPTH,
    contains_nul,
    needs_normalising,
    nests_deeper,
    normalise_numbers,
)
from ingest.attributes import too_far_ahead
from ingest.limits import Limits
from ingest.openlineage.mapping import Parsed
from ingest.openlineage.schema import Kind

_PARENT = "#/run/facets/parent"


def check_storable(parsed: Parsed, limits: Limits, now: datetime | None = None) -> None:
    """Raise the error a client is answered with when ``parsed`` cannot be stored as it is;
    ``now`` is the server's clock (read when None). ``check_value`` is done first."""
    _check_present(parsed)
    _check_names(parsed, limits.max_attributes_bytes)
    if limits.max_future_s is not None:
        _check_time(parsed, limits.max_future_s, now or datetime.now(UTC))


def check_depth(event: Any) -> None:
    """Refuse an event nested deeper than the log keeps: checked before the schema, whose
    error messages show the event (past about 900 levels, making one overflowed the
    stack)."""
    if nests_deeper(event):
        _refuse(f"it nests arrays and objects more than {MAX_DATA_DEPTH} levels deep")


def check_value(event: Any) -> None:
    """Refuse what the log cannot keep of a valid event (``check_depth`` passed): its
    facets are copied into the dataset versions' JSON data, and its names into text
    columns."""
    why = None
    if contains_nul(event):
        why = "it holds the character U+0000, which cannot be stored"
    elif needs_normalising(event):
        try:
            normalise_numbers(event)
        except ValueError as exc:
            why = str(exc)
    if why is not None:
        _refuse(why)


def _refuse(why: str) -> None:
    raise InvalidOpenLineageEvent(
        f"the event cannot be stored: {why}", errors=[{"pointer": "#", "detail": why}]
    )


def _check_present(parsed: Parsed) -> None:
    """The members that become attributes CloudEvents wants non-empty."""
    event = parsed.event
    named = "dataset" if parsed.kind is Kind.DATASET else "job"
    present = [("#/producer", event["producer"]), (f"#/{named}/name", event[named]["name"])]
    if parsed.kind is not Kind.DATASET:  # each input and output: a dataset version's subject
        for side in ("inputs", "outputs"):
            for n, dataset in enumerate(event.get(side) or ()):
                present.append((f"#/{side}/{n}/name", dataset["name"]))
    for pointer, value in present:
        if value == "":
            what = "source" if pointer == "#/producer" else "subject"
            detail = f"{pointer[2:]} is empty: it is the {what} of a CloudEvent, which cannot be"
            raise InvalidOpenLineageEvent(
                f"the event cannot be stored: {detail}",
                errors=[{"pointer": pointer, "detail": detail}],
            )


def _check_names(parsed: Parsed, max_bytes: int) -> None:
    """Each attribute the event's names make, within ``max_bytes``; the first one over is
    refused, named by the member it is made of (the longer one, for a stream)."""
    for what, value, members in _named(parsed):
        size = _size(value)
        if size > max_bytes:
            where = max(members, key=lambda member: _size(member[1]))[0]
            detail = (
                f"the {what} made of {where} would take {size} bytes, over the {max_bytes}-byte "
                "limit on an attribute (CAUSEWAY_MAX_ATTRIBUTES_BYTES)"
            )
            raise EventTooLarge(
                detail,
                errors=[{"pointer": where, "detail": detail}],
                max_attributes_bytes=max_bytes,
            )


def _named(parsed: Parsed) -> Iterator[tuple[str, str, list[tuple[str, str]]]]:
    """Each attribute made of the event's names: what it is, its value, and the members
    it is made of (their pointers and values), in document order."""
    event = parsed.event
    yield "source", str(event["producer"]), [("#/producer", str(event["producer"]))]
    if parsed.kind is Kind.DATASET:
        yield _stream(event["dataset"], "#/dataset", dataset_stream)
        return
    job = event["job"]
    if parsed.kind is Kind.JOB:
        yield _stream(job, "#/job", job_stream)
        return
    yield "subject", str(job["name"]), [("#/job/name", str(job["name"]))]
    # Either may be the correlationid (the root run's, else the parent's).
    if parsed.parent_run_id is not None:
        where = f"{_PARENT}/run/runId"
        yield "correlationid", parsed.parent_run_id, [(where, parsed.parent_run_id)]
    if parsed.root_run_id is not None:
        where = f"{_PARENT}/root/run/runId"
        yield "correlationid", parsed.root_run_id, [(where, parsed.root_run_id)]
    # A run event's datasets get versions on their streams (an input's, when first seen;
    # an output's, on COMPLETE): every one is held to it, whatever the log holds yet.
    for key in ("inputs", "outputs"):
        for index, item in enumerate(event.get(key) or ()):
            yield _stream(item, f"#/{key}/{index}", dataset_stream)


def _stream(
    named: dict[str, Any], at: str, stream_of: Callable[[str, str], str]
) -> tuple[str, str, list[tuple[str, str]]]:
    namespace, name = str(named["namespace"]), str(named["name"])
    members = [(f"{at}/namespace", namespace), (f"{at}/name", name)]
    return "stream", stream_of(namespace, name), members


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _check_time(parsed: Parsed, max_future_s: float, now: datetime) -> None:
    text = str(parsed.event["eventTime"])
    detail = too_far_ahead("eventTime", text, parsed.time, max_future_s, now)
    if detail is not None:
        raise TimeInFuture(detail, errors=[{"pointer": "#/eventTime", "detail": detail}])
