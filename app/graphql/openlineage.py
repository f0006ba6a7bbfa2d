"""The GraphQL object types of OpenLineage in the log: runs, datasets and their versions
(docs/openlineage.md). Built from stored events; ``Event`` objects come from the maker
the caller passes, so an answer holds one object per event.
"""

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import strawberry
from strawberry.scalars import JSON

from app.graphql.scalars import BigInt
from app.store.openlineage import DatasetRecord, run_key, run_of
from app.store.records import StoredEvent

if TYPE_CHECKING:
    from app.graphql.types import Event

EventRef = Annotated["Event", strawberry.lazy("app.graphql.types")]
MakeEvent = Callable[[StoredEvent], Any]
_TERMINAL = ("COMPLETE", "FAIL", "ABORT")


@strawberry.type(description="An OpenLineage job, by its namespace and name.")
class Job:
    namespace: str
    name: str


@strawberry.type(description="An OpenLineage run, as its stored events tell it.")
class LineageRun:
    run_id: str
    job: Job | None
    state: str | None = strawberry.field(
        description=(
            "The last terminal eventType stored (COMPLETE, FAIL, ABORT), else the last one; "
            "null when no event of the run is stored."
        )
    )
    parent_run_id: str | None
    events: list[EventRef] = strawberry.field(description="The run's events, in log order.")

    @classmethod
    def build(cls, run_id: str, stored: Sequence[StoredEvent], event: MakeEvent) -> "LineageRun":
        sent = [run_of(e.record.data_binary) or {} for e in stored]
        types = [str(s.get("eventType") or "OTHER") for s in sent]
        terminal = [t for t in types if t in _TERMINAL]
        job = next((s["job"] for s in sent if isinstance(s.get("job"), dict)), None)
        # The schema checks no facet's body: a parent facet of another shape (or with an
        # empty runId) names no parent, as at ingest (ingest/openlineage/mapping.py).
        parents = (_text_at(s, "run", "facets", "parent", "run", "runId") for s in sent)
        parent = next((run_key(p) for p in parents if p is not None), None)
        return cls(
            run_id=run_id,
            job=None if job is None else Job(namespace=job["namespace"], name=job["name"]),
            state=(terminal or types)[-1] if types else None,
            parent_run_id=parent,
            events=[event(e) for e in stored],
        )


@strawberry.type(
    description="One version of a dataset: written by a run, or first named as an input."
)
class DatasetVersion:
    namespace: str
    name: str
    version: str = strawberry.field(
        description="The dataset's own version (its 'version' facet) when it has one, else the id of this version's event."
    )
    external: bool = strawberry.field(
        description="True when no run of the log wrote it: first named as an input."
    )
    schema: JSON | None = strawberry.field(description="The 'schema' facet's fields.")
    row_count: BigInt | None = strawberry.field(
        description="rowCount of the outputStatistics (or inputStatistics) facet."
    )
    size_bytes: BigInt | None = strawberry.field(description="size of the same facet.")
    facets: JSON = strawberry.field(description="The dataset facets, as sent.")
    io_facets: JSON = strawberry.field(description="outputFacets (or inputFacets), as sent.")
    written_by_run_id: str | None
    read_by_run_ids: list[str] = strawberry.field(
        description="The runs whose events name this version as a cause (in dataset only)."
    )
    event: EventRef

    @classmethod
    def build(
        cls, stored: StoredEvent, event: MakeEvent, read_by: Sequence[str] = ()
    ) -> "DatasetVersion":
        data = stored.record.data or {}
        facets, io = (
            data.get("facets") or {},
            data.get("outputFacets") or data.get("inputFacets") or {},
        )
        stats = io.get("outputStatistics") or io.get("inputStatistics") or {}
        own = (facets.get("version") or {}).get("datasetVersion")
        schema = (facets.get("schema") or {}).get("fields")
        return cls(
            namespace=data.get("namespace", ""),
            name=data.get("name", ""),
            version=str(own) if own is not None else stored.record.id,
            external=bool(data.get("external")),
            schema=None if schema is None else JSON(schema),
            row_count=_integer(stats.get("rowCount")),
            size_bytes=_integer(stats.get("size")),
            facets=JSON(facets),
            io_facets=JSON(io),
            written_by_run_id=(data.get("run") or {}).get("runId"),
            read_by_run_ids=list(read_by),
            event=event(stored),
        )


def _integer(value: Any) -> BigInt | None:
    # A count or size of the facet, as sent when it is an integer (a 5 GB training set too:
    # BigInt, not GraphQL's 32-bit Int).
    return BigInt(value) if type(value) is int else None


@strawberry.type(description="A dataset: its versions, and the runs that wrote and read them.")
class Dataset:
    namespace: str
    name: str
    versions: list[DatasetVersion]
    runs: list[LineageRun] = strawberry.field(
        description="Every run that wrote or read a version, in the order first seen."
    )
    metadata_events: list[EventRef] = strawberry.field(
        description="The DatasetEvents sent about it (static metadata), in log order."
    )

    @classmethod
    def build(
        cls,
        namespace: str,
        name: str,
        record: DatasetRecord,
        runs: dict[str, list[StoredEvent]],
        event: MakeEvent,
    ) -> "Dataset":
        versions = [
            DatasetVersion.build(v, event, record.readers.get(v.record.id, ()))
            for v in record.versions
        ]
        return cls(
            namespace=namespace,
            name=name,
            versions=versions,
            runs=[LineageRun.build(r, runs[r], event) for r in run_ids(record) if r in runs],
            metadata_events=[event(e) for e in record.static_events],
        )


def run_ids(record: DatasetRecord) -> list[str]:
    """The runs that wrote or read a version of the dataset, first seen first."""
    found: dict[str, None] = {}
    for version in record.versions:
        writer = ((version.record.data or {}).get("run") or {}).get("runId")
        if writer:
            found[writer] = None
        found.update(dict.fromkeys(record.readers.get(version.record.id, ())))
    return list(found)


@strawberry.type(description="An OpenLineage run that trained a model version of the audit.")
class TrainingRun:
    model_name: str
    model_version: str
    run: LineageRun


def _text_at(value: Any, *path: str) -> str | None:
    """The non-empty string at ``path`` in ``value`` (objects all the way), or None."""
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, str) and value else None
