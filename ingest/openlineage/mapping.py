"""How an OpenLineage event becomes CloudEvents in the log (docs/openlineage.md).

Pure: ``parse`` reads what the mapping needs from a valid event; ``plan`` builds the
events to append from it and from what the log holds (``Known``), which the caller reads.

- The event itself: ``type`` ``io.openlineage.run.<eventType>`` (lower case; ``other``
  when it has none), ``io.openlineage.dataset.event`` or ``io.openlineage.job.event``;
  ``source`` its ``producer``; ``stream`` ``openlineage:run:<runId>`` (a dataset's or a
  job's stream for the static events); ``data`` the request body's bytes, unchanged
  (``datacontenttype`` application/json); ``dataschema`` its ``schemaURL``; ``time`` its
  ``eventTime``; ``id`` ``openlineage:`` and the SHA-256 of its canonical JSON, so a
  client's retry is the same event.
- A dataset version (``io.openlineage.dataset.version``, JSON data) for each output of a
  ``COMPLETE``, caused by it; and for each input the log has no version of yet, one
  with no causes (an external source), before the run event.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import orjson

from app.store.openlineage import (
    DATASET_EVENT,
    DATASET_VERSION,
    JOB_EVENT,
    RUN_TYPE_PREFIX,
    Head,
    dataset_stream,
    job_stream,
    run_key,
    run_stream,
)
from app.store.records import NewEvent
from app.store.timestamps import parse_rfc3339
from ingest.openlineage.schema import Kind

_CONTENT_TYPE = "application/json"


@dataclass(frozen=True, slots=True)
class DatasetRef:
    namespace: str
    name: str
    facets: dict[str, Any]
    io_facets: dict[str, Any]  # inputFacets or outputFacets

    @property
    def stream(self) -> str:
        return dataset_stream(self.namespace, self.name)

    @property
    def version(self) -> str | None:
        """The ``datasetVersion`` its ``version`` facet names (an Iceberg snapshot, a Delta
        version), if it names one."""
        return _member(self.facets, "version", "datasetVersion")


@dataclass(frozen=True, slots=True)
class Parsed:
    """A valid OpenLineage event and what the mapping reads of it."""

    kind: Kind
    event: dict[str, Any]
    body: bytes
    id: str
    stream: str
    state: str | None  # a run event's eventType, lower case ("other" when it has none)
    time: datetime  # eventTime
    run_id: str | None
    parent_run_id: str | None  # the parent facet's run.runId, a non-empty string
    root_run_id: str | None  # the parent facet's root.run.runId, a non-empty string
    inputs: tuple[DatasetRef, ...]
    outputs: tuple[DatasetRef, ...]
    # A run event stored after its run's COMPLETE (``after_complete``): it reads and writes
    # the datasets it names first, as the COMPLETE did its run's.
    late: bool = False

    @property
    def writes(self) -> bool:
        """Whether it makes versions of its outputs and is caused by its inputs'."""
        # A late FAIL or ABORT writes nothing, as one in order does.
        return self.state == "complete" or (self.late and self.state not in ("fail", "abort"))

    @property
    def type(self) -> str:
        if self.kind is Kind.RUN:
            return RUN_TYPE_PREFIX + (self.state or "other")
        return DATASET_EVENT if self.kind is Kind.DATASET else JOB_EVENT

    def streams_to_look_up(self) -> list[str]:
        """The streams whose last event the plan needs: the event's own, the parent run's,
        and a run's inputs' (an input's first version expects its stream as it was)."""
        streams = [self.stream]
        if self.parent_run_id is not None and self.parent_run_id != self.run_id:
            streams.append(run_stream(self.parent_run_id))
        if self.kind is Kind.RUN:
            streams += [d.stream for d in self.inputs if d.stream not in streams]
        return streams

    def versions_to_look_up(self) -> list[tuple[str, str]]:
        """The (dataset stream, datasetVersion) of each input that names its version."""
        if self.kind is not Kind.RUN:
            return []
        return [(d.stream, d.version) for d in self.inputs if d.version is not None]

    def datasets_to_look_up(self) -> list[str]:
        """The dataset streams whose last version the plan needs."""
        if self.kind is Kind.DATASET:
            return [self.stream]
        return list(dict.fromkeys(d.stream for d in self.inputs))


@dataclass(frozen=True, slots=True)
class Known:
    """What the log holds that a plan needs: the last event of the streams it looked up,
    and the last version event of the datasets (by stream)."""

    heads: Mapping[str, Head]
    versions: Mapping[str, Head]
    # The version events an input names by its version facet, by (stream, datasetVersion).
    named: Mapping[tuple[str, str], Head] = field(default_factory=dict)
    # Of a late event's inputs, the datasets whose versions all came after its run began:
    # it read none of them (router._known), and makes no external version of its own.
    versioned_later: frozenset[str] = frozenset()


def event_id(event: dict[str, Any]) -> str:
    canonical = orjson.dumps(event, option=orjson.OPT_SORT_KEYS)
    return "openlineage:" + hashlib.sha256(canonical).hexdigest()


def parse(kind: Kind, event: dict[str, Any], body: bytes) -> Parsed:
    run_id = parent = root = state = None
    if kind is Kind.RUN:
        run_id = run_key(str(event["run"]["runId"]))  # one run, however its UUID is written
        state = str(event.get("eventType") or "OTHER").lower()
        # The schema checks no facet's body: a parent facet of another shape names no run.
        parent_facet = (event["run"].get("facets") or {}).get("parent")
        parent = _run_key(_member(parent_facet, "run", "runId"))
        root = _run_key(_member(parent_facet, "root", "run", "runId"))
        stream = run_stream(run_id)
    elif kind is Kind.DATASET:
        stream = dataset_stream(event["dataset"]["namespace"], event["dataset"]["name"])
    else:
        stream = job_stream(event["job"]["namespace"], event["job"]["name"])
    return Parsed(
        kind=kind,
        event=event,
        body=body,
        id=event_id(event),
        stream=stream,
        state=state,
        time=_instant(str(event["eventTime"])),
        run_id=run_id,
        parent_run_id=parent,
        root_run_id=root,
        # A DatasetEvent's schema names no inputs or outputs (it takes other members
        # unchecked): only a run's or a job's are datasets.
        inputs=() if kind is Kind.DATASET else _datasets(event.get("inputs"), "inputFacets"),
        outputs=() if kind is Kind.DATASET else _datasets(event.get("outputs"), "outputFacets"),
    )


def _member(value: Any, *path: str) -> str | None:
    """The non-empty string at ``path`` in ``value`` (objects all the way), or None."""
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, str) and value else None


def _run_key(run_id: str | None) -> str | None:
    return None if run_id is None else run_key(run_id)


def _instant(text: str) -> datetime:
    at, why = parse_rfc3339(text)
    if at is None:  # cannot be: the schema checked the format (schema._checker)
        raise ValueError(why)
    return at


def _datasets(items: Any, io_key: str) -> tuple[DatasetRef, ...]:
    return _first_of_each(
        [
            DatasetRef(
                item["namespace"], item["name"], item.get("facets") or {}, item.get(io_key) or {}
            )
            for item in items or ()
        ]
    )


def with_earlier(parsed: Parsed, earlier: Sequence[Mapping[str, Any]]) -> Parsed:
    """A ``COMPLETE`` with the datasets its run's ``earlier`` events named (OpenLineage
    accumulates a run's inputs and outputs over its events: a client may name its inputs
    at ``START`` alone): its own first, then theirs in log order, each dataset once."""
    if parsed.state != "complete":
        return parsed
    inputs, outputs = list(parsed.inputs), list(parsed.outputs)
    for event in earlier:
        inputs += _datasets(event.get("inputs"), "inputFacets")
        outputs += _datasets(event.get("outputs"), "outputFacets")
    return replace(parsed, inputs=_first_of_each(inputs), outputs=_first_of_each(outputs))


def after_complete(parsed: Parsed, earlier: Sequence[Mapping[str, Any]]) -> Parsed:
    """A run event that arrives after its run's ``COMPLETE`` (an asynchronous transport
    delivers a ``START`` late): the datasets it names that none of the run's ``earlier``
    events named, read and written by it as the ``COMPLETE`` would have (else they were
    never versioned, nor linked to the run: an audit lost a model's training data); none
    when no ``COMPLETE`` is among them."""
    if parsed.kind is not Kind.RUN or parsed.state == "complete":
        return parsed
    if not any(is_complete(e) for e in earlier):
        return parsed
    named_in = {(d.namespace, d.name) for e in earlier for d in _datasets(e.get("inputs"), "")}
    named_out = {(d.namespace, d.name) for e in earlier for d in _datasets(e.get("outputs"), "")}
    inputs = tuple(d for d in parsed.inputs if (d.namespace, d.name) not in named_in)
    outputs = tuple(d for d in parsed.outputs if (d.namespace, d.name) not in named_out)
    return replace(parsed, inputs=inputs, outputs=outputs, late=True)


def is_complete(sent: Mapping[str, Any]) -> bool:
    """Whether the stored run event ``sent`` (as sent) is a ``COMPLETE``."""
    return str(sent.get("eventType") or "").lower() == "complete"


def _first_of_each(refs: list[DatasetRef]) -> tuple[DatasetRef, ...]:
    found: dict[tuple[str, str], DatasetRef] = {}
    for ref in refs:
        found.setdefault((ref.namespace, ref.name), ref)
    return tuple(found.values())


def plan(parsed: Parsed, known: Known) -> list[NewEvent]:
    """The events to append, in order: external versions of first-seen inputs, the event
    itself (with ``expected_version`` on its stream, so a concurrent event of the same run
    makes the append conflict and the caller plan again; a DatasetEvent with none), then
    output versions."""
    first: list[NewEvent] = []
    input_versions: list[str] = []
    if parsed.kind is Kind.RUN:
        for ref in parsed.inputs:
            seen = known.versions.get(ref.stream)
            if ref.version is not None:  # the version the run says it read, if stored
                seen = known.named.get((ref.stream, ref.version), seen)
            if seen is None and ref.stream in known.versioned_later:
                continue
            if seen is None:
                # Expecting the dataset's stream as it was read: of runs that race to name
                # a new input first, one writes its version; the others conflict, plan
                # again, and read it.
                head = known.heads.get(ref.stream)
                expected = 0 if head is None else head.stream_version
                external = _version(parsed, ref, external=True, expected_version=expected)
                first.append(external)
                input_versions.append(external.id)
            else:
                input_versions.append(seen.id)
    causes = _causes(parsed, known, input_versions)
    head = known.heads.get(parsed.stream)
    # A DatasetEvent expects nothing of its stream: the dataset's versions go there too,
    # which COMPLETEs append with no expectation, and it follows a recent one, whatever
    # came since.
    version = None if parsed.kind is Kind.DATASET else 0 if head is None else head.stream_version
    main = _main_event(parsed, causes, version)
    after = []
    if parsed.writes:
        after = [_version(parsed, ref, external=False) for ref in parsed.outputs]
    return [*first, main, *after]


def planned_ids(parsed: Parsed) -> list[str]:
    """The ids ``plan`` can give, in its order, whatever the log held: its first answer
    listed those of them that are stored (an input's external version only when this
    event named the input first), so a re-send is answered with the same events."""
    externals = [] if parsed.kind is not Kind.RUN else parsed.inputs
    outputs = parsed.outputs if parsed.writes else []
    return [
        *(_version_id(parsed, ref, external=True) for ref in externals),
        parsed.id,
        *(_version_id(parsed, ref, external=False) for ref in outputs),
    ]


def _causes(parsed: Parsed, known: Known, input_versions: list[str]) -> tuple[str, ...]:
    causes: list[str] = []
    own = known.heads.get(parsed.stream)
    if parsed.kind is Kind.DATASET:
        latest = known.versions.get(parsed.stream)
        own = latest  # a DatasetEvent follows the dataset's last version, if any
    if own is not None:
        causes.append(own.id)
    if parsed.parent_run_id is not None:
        parent = known.heads.get(run_stream(parsed.parent_run_id))
        if parent is not None:
            causes.append(parent.id)
    if parsed.writes:
        causes += input_versions
    return tuple(dict.fromkeys(c for c in causes if c != parsed.id))


def correlation(parsed: Parsed) -> str | None:
    """The root run, else the parent run, else the run itself (None: not a run event)."""
    if parsed.kind is not Kind.RUN:
        return None
    return parsed.root_run_id or parsed.parent_run_id or parsed.run_id


def _subject(parsed: Parsed) -> str:
    if parsed.kind is Kind.DATASET:
        return str(parsed.event["dataset"]["name"])
    return str(parsed.event["job"]["name"])


def _main_event(parsed: Parsed, causes: tuple[str, ...], version: int | None) -> NewEvent:
    event = parsed.event
    time = str(event["eventTime"])
    return NewEvent(
        id=parsed.id,
        source=str(event["producer"]),
        type=parsed.type,
        stream=parsed.stream,
        subject=_subject(parsed),
        time=time,
        time_value=parsed.time,
        datacontenttype=_CONTENT_TYPE,
        dataschema=str(event["schemaURL"]),
        has_data=True,
        data_binary=parsed.body,
        causes=causes,
        correlation_id=correlation(parsed),
        expected_version=version,
    )


def _version_id(parsed: Parsed, ref: DatasetRef, *, external: bool) -> str:
    kind = "external" if external else "output"
    digest = hashlib.sha256(f"{kind}\n{parsed.id}\n{ref.namespace}\n{ref.name}".encode())
    return "openlineage:version:" + digest.hexdigest()


def _version(
    parsed: Parsed, ref: DatasetRef, *, external: bool, expected_version: int | None = None
) -> NewEvent:
    """A dataset version event: an output written by this run's COMPLETE, or (external)
    an input first named by this event, which has no causes."""
    event = parsed.event
    time = str(event["eventTime"])
    return NewEvent(
        id=_version_id(parsed, ref, external=external),
        source=str(event["producer"]),
        type=DATASET_VERSION,
        stream=ref.stream,
        subject=ref.name,
        time=time,
        time_value=parsed.time,
        has_data=True,
        data={
            "namespace": ref.namespace,
            "name": ref.name,
            "facets": ref.facets,
            ("inputFacets" if external else "outputFacets"): ref.io_facets,
            "external": external,
            "run": None
            if external
            else {
                "runId": parsed.run_id,
                "job": {"namespace": event["job"]["namespace"], "name": event["job"]["name"]},
            },
            "namedBy": parsed.id,
        },
        causes=() if external else (parsed.id,),
        correlation_id=correlation(parsed),
        expected_version=expected_version,
    )
