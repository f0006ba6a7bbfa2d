"""OpenLineage in the log: the names its events take (types, streams) and the reads that
ingest needs to plan one (``ingest.openlineage``): whether an event is stored, and the
last event of some streams. docs/openlineage.md describes the mapping.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Text, any_, func, literal, select, tuple_
from sqlalchemy.dialects.postgresql import ARRAY, distinct_on
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import event_causes, events
from app.store.log import full_row, record_from_row
from app.store.records import Appended, StoredEvent

RUN_TYPE_PREFIX = "io.openlineage.run."
DATASET_EVENT = "io.openlineage.dataset.event"
DATASET_VERSION = "io.openlineage.dataset.version"
JOB_EVENT = "io.openlineage.job.event"
_e = events.c


def _escaped(text: str) -> str:
    # ':' separates a stream's parts and namespaces hold it (postgres://db:5432), so it
    # is escaped, and '%' with it, to keep one stream per dataset and one dataset per stream.
    return text.replace("%", "%25").replace(":", "%3A")


def run_key(run_id: str) -> str:
    """A runId as the store keys it: a UUID in its canonical form (lower case, hyphenated),
    so that one run written otherwise (upper case; the registry takes braces, ``urn:uuid:``
    and no hyphens too) is one run; any other text as it is."""
    try:
        return str(uuid.UUID(run_id))
    except ValueError:
        return run_id


def run_stream(run_id: str) -> str:
    return f"openlineage:run:{run_key(run_id)}"


def dataset_stream(namespace: str, name: str) -> str:
    return f"openlineage:dataset:{_escaped(namespace)}:{_escaped(name)}"


def job_stream(namespace: str, name: str) -> str:
    return f"openlineage:job:{_escaped(namespace)}:{_escaped(name)}"


def run_of(data_binary: bytes | None) -> dict[str, Any] | None:
    """The OpenLineage event a run event stored (its bytes as sent), or None."""
    if data_binary is None:
        return None
    try:
        event = orjson.loads(data_binary)
    except orjson.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None


@dataclass(frozen=True, slots=True)
class Head:
    """The last event of a stream (of one type, for a dataset's versions)."""

    id: str
    stream_version: int


def _texts(values: Iterable[str]) -> Any:
    """``values`` as one array parameter: a run may name tens of thousands of datasets, past
    the 65,535 parameters a statement may have, were each a parameter of its own."""
    return literal(list(values), ARRAY(Text))


async def fetch_stored(conn: AsyncConnection, tenant: str, event_id: str) -> Appended | None:
    """Where the event ``event_id`` is stored (as a re-send's answer), or None."""
    found = await fetch_all_stored(conn, tenant, [event_id])
    return found[0] if found else None


async def fetch_all_stored(
    conn: AsyncConnection, tenant: str, event_ids: Sequence[str]
) -> list[Appended]:
    """Where each of ``event_ids`` that is stored is, in their order (as a re-send's
    answer)."""
    rows = await conn.execute(
        select(_e.id, _e.source, _e.stream, _e.stream_version, _e.position).where(
            _e.tenant == tenant, _e.id == any_(_texts(event_ids))
        )
    )
    found = {
        r.id: Appended(r.id, r.source, r.stream, r.stream_version, r.position, True) for r in rows
    }
    return [found[i] for i in event_ids if i in found]


async def fetch_heads(
    conn: AsyncConnection,
    tenant: str,
    streams: Sequence[str],
    *,
    type: str | None = None,
    before_position: int | None = None,
) -> dict[str, Head]:
    """The last event of each of ``streams`` that has one (of ``type`` only, when given;
    with ``before_position``, the last before that position)."""
    if not streams:
        return {}
    statement = (
        select(_e.stream, _e.id, _e.stream_version)
        .where(_e.tenant == tenant, _e.stream == any_(_texts(streams)))
        .ext(distinct_on(_e.stream))
        .order_by(_e.stream, _e.stream_version.desc())
    )
    if type is not None:
        statement = statement.where(_e.type == type)
    if before_position is not None:
        statement = statement.where(_e.position < before_position)
    rows = await conn.execute(statement)
    return {row.stream: Head(row.id, row.stream_version) for row in rows}


async def fetch_named_versions(
    conn: AsyncConnection, tenant: str, wanted: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], Head]:
    """Of each ``(dataset stream, datasetVersion)`` of ``wanted``, the last version event
    of that stream whose ``version`` facet names that ``datasetVersion``, if the log has
    one (a run that names the version of an input it read is linked to that version)."""
    if not wanted:
        return {}
    named = _e.data[("facets", "version", "datasetVersion")].astext
    rows = await conn.execute(
        select(_e.stream, named.label("named"), _e.id, _e.stream_version)
        .where(
            _e.tenant == tenant,
            _e.type == DATASET_VERSION,
            tuple_(_e.stream, named).in_(
                select(
                    func.unnest(_texts(s for s, _ in wanted)),
                    func.unnest(_texts(v for _, v in wanted)),
                )
            ),
        )
        .ext(distinct_on(_e.stream, named))
        .order_by(_e.stream, named, _e.stream_version.desc())
    )
    return {(row.stream, row.named): Head(row.id, row.stream_version) for row in rows}


@dataclass(frozen=True, slots=True)
class DatasetRecord:
    """A dataset's events in the log: its versions and its DatasetEvents (by position),
    and for each version the runs (stream names ``openlineage:run:<runId>``) whose events
    it caused: the runs that read it."""

    versions: list[StoredEvent]
    static_events: list[StoredEvent]
    readers: dict[str, list[str]]  # version id -> runIds that read it, first read first


async def read_dataset(
    conn: AsyncConnection, tenant: str, namespace: str, name: str
) -> DatasetRecord | None:
    rows = await conn.execute(
        select(*full_row())
        .where(_e.tenant == tenant, _e.stream == dataset_stream(namespace, name))
        .order_by(_e.stream_version)
    )
    found = [StoredEvent(record_from_row(r), bytes(r.prev_hash), bytes(r.hash)) for r in rows]
    if not found:
        return None
    versions = [e for e in found if e.record.type == DATASET_VERSION]
    effect = events.alias("effect")
    read_by = await conn.execute(
        select(event_causes.c.cause, effect.c.stream)
        .join(effect, effect.c.position == event_causes.c.effect)
        .where(
            # A subquery, not the versions' positions: a list would be a parameter each.
            event_causes.c.cause.in_(
                select(_e.position).where(
                    _e.tenant == tenant,
                    _e.stream == dataset_stream(namespace, name),
                    _e.type == DATASET_VERSION,
                )
            ),
            effect.c.tenant == tenant,
            effect.c.type.startswith(RUN_TYPE_PREFIX),
            # A run's own stream: POST /events takes these types on any other stream.
            effect.c.stream.startswith(run_stream(""), autoescape=True),
        )
        .order_by(effect.c.position)
    )
    by_position = {v.position: v.record.id for v in versions}
    readers: dict[str, list[str]] = {}
    prefix = run_stream("")
    for cause, stream in read_by:
        if cause not in by_position:
            # A version committed after the versions were read (GraphQL reads each
            # statement in its own snapshot), with a run reading it: the next read has both.
            continue
        runs = readers.setdefault(by_position[cause], [])
        if stream.removeprefix(prefix) not in runs:
            runs.append(stream.removeprefix(prefix))
    return DatasetRecord(versions, [e for e in found if e.record.type == DATASET_EVENT], readers)


async def read_run_events(
    conn: AsyncConnection, tenant: str, run_ids: Sequence[str]
) -> dict[str, list[StoredEvent]]:
    """The stored events of each run of ``run_ids`` that has any, in log order."""
    if not run_ids:
        return {}
    streams = {run_stream(r): r for r in run_ids}
    rows = await conn.execute(
        select(*full_row())
        .where(_e.tenant == tenant, _e.stream == any_(_texts(streams)))
        .order_by(_e.position)
    )
    found: dict[str, list[StoredEvent]] = {}
    for r in rows:
        event = StoredEvent(record_from_row(r), bytes(r.prev_hash), bytes(r.hash))
        found.setdefault(streams[r.stream], []).append(event)
    return found
