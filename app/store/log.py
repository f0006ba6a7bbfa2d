"""The event log: the only code that inserts into ``events`` and ``event_causes``.

Rows are never updated or deleted (triggers from the first migration refuse it). Every
append first locks the single ``log_head`` row, then reads, so appends are serialised in
the database: positions are dense and commit order equals position order, across
processes too. The caller owns the transaction; nothing here commits.

An event's id is unique in its tenant. A re-sent event (same source, id and content) is
reported as a duplicate with its stored position and appends nothing; the same id with
other content, or from another source, is an ``IdConflict``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Text, any_, func, literal, select, update
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import event_causes, events, log_head
from app.errors import IdConflict, UnknownCause, VersionConflict
from app.store.chain import ChainRecord, canonical_bytes, link
from app.store.records import Appended, NewEvent

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class _Stored:
    position: int
    stream: str
    stream_version: int
    record: ChainRecord


class EventLog:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def append(self, tenant: str, batch: Sequence[NewEvent]) -> list[Appended]:
        """Append ``batch`` atomically, in order; raise before writing anything on error."""
        if not batch:
            return []
        # Lock first, then read: a statement that both waited for the lock and read the
        # tail would see a snapshot from before the wait.
        head = (
            await self._conn.execute(select(log_head.c.position, log_head.c.hash).with_for_update())
        ).one()
        stored = await self._fetch_stored(tenant, {e.id for e in batch})
        cause_positions = await self._fetch_positions(
            tenant, {c for e in batch for c in e.causes} - {e.id for e in batch}
        )
        versions = await self._fetch_stream_versions(tenant, {e.stream for e in batch})
        cause_positions.update({i: s.position for i, s in stored.items()})

        recorded_at = datetime.now(UTC)
        position, prev_hash = int(head.position), bytes(head.hash)
        fresh: dict[str, _Stored] = {}
        outcomes: list[Appended] = []
        rows: list[dict[str, Any]] = []
        edges: list[dict[str, int]] = []
        id_errors: list[dict[str, Any]] = []
        cause_errors: list[dict[str, Any]] = []
        for index, event in enumerate(batch):
            earlier = stored.get(event.id) or fresh.get(event.id)
            if earlier is not None:
                problem = _compare(event, tenant, earlier.record)
                if problem is not None:
                    id_errors.append({"index": index, "attribute": "id", "detail": problem})
                    continue
                outcomes.append(
                    Appended(
                        event.id,
                        event.source,
                        earlier.stream,
                        earlier.stream_version,
                        earlier.position,
                        duplicate=True,
                    )
                )
                continue
            missing = [c for c in event.causes if c not in cause_positions]
            if missing:
                cause_errors.append(
                    {
                        "index": index,
                        "attribute": "causationid",
                        "detail": f"unknown cause ids: {', '.join(missing)}",
                        "missing": missing,
                    }
                )
                continue
            actual = versions.get(event.stream, 0)
            if event.expected_version is not None and event.expected_version != actual:
                raise VersionConflict(
                    f"stream {event.stream!r} is at version {actual}, not {event.expected_version}",
                    stream=event.stream,
                    expected=event.expected_version,
                    actual=actual,
                    index=index,
                )
            position += 1
            versions[event.stream] = actual + 1
            record = _record(event, tenant, position, actual + 1, recorded_at)
            this_hash = link(prev_hash, record)
            rows.append(_row(event, tenant, record, prev_hash, this_hash))
            edges.extend(
                {"effect": position, "cause": cause_positions[c]}
                for c in dict.fromkeys(event.causes)
            )
            prev_hash = this_hash
            fresh[event.id] = _Stored(position, event.stream, actual + 1, record)
            cause_positions[event.id] = position
            outcomes.append(
                Appended(
                    event.id, event.source, event.stream, actual + 1, position, duplicate=False
                )
            )
        if id_errors:
            raise IdConflict(_summary(id_errors), errors=id_errors)
        if cause_errors:
            raise UnknownCause(_summary(cause_errors), errors=cause_errors)
        if rows:
            await self._conn.execute(insert(events), rows)
            if edges:
                await self._conn.execute(insert(event_causes), edges)
            await self._conn.execute(update(log_head).values(position=position, hash=prev_hash))
        return outcomes

    async def _fetch_stored(self, tenant: str, ids: set[str]) -> dict[str, _Stored]:
        result = await self._conn.execute(
            select(*full_row()).where(events.c.tenant == tenant, events.c.id == any_(_texts(ids)))
        )
        return {
            row.id: _Stored(row.position, row.stream, row.stream_version, record_from_row(row))
            for row in result
        }

    async def _fetch_positions(self, tenant: str, ids: set[str]) -> dict[str, int]:
        if not ids:
            return {}
        result = await self._conn.execute(
            select(events.c.id, events.c.position).where(
                events.c.tenant == tenant, events.c.id == any_(_texts(ids))
            )
        )
        return {row.id: row.position for row in result}

    async def _fetch_stream_versions(self, tenant: str, streams: set[str]) -> dict[str, int]:
        result = await self._conn.execute(
            select(events.c.stream, func.max(events.c.stream_version))
            .where(events.c.tenant == tenant, events.c.stream == any_(_texts(streams)))
            .group_by(events.c.stream)
        )
        return {stream: int(version) for stream, version in result}


def full_row() -> tuple[Any, ...]:
    """The columns ``record_from_row`` needs: all of ``events``, and whether ``data`` is set
    (a JSON ``null`` loads as ``None`` too, so SQL has to tell)."""
    return (events, events.c.data.is_not(None).label("has_json_data"))


def record_from_row(row: Any) -> ChainRecord:
    """The chain record of a stored ``events`` row, selected with ``full_row()``."""
    return ChainRecord(
        position=row.position,
        tenant=row.tenant,
        id=row.id,
        source=row.source,
        type=row.type,
        subject=row.subject,
        time=row.time_rfc3339,
        recorded_at=row.recorded_at,
        stream=row.stream,
        stream_version=row.stream_version,
        datacontenttype=row.datacontenttype,
        dataschema=row.dataschema,
        has_data=bool(row.has_json_data) or row.data_binary is not None,
        data=row.data,
        data_binary=bytes(row.data_binary) if row.data_binary is not None else None,
        extensions=row.extensions,
        causes=tuple(row.causes),
        correlation_id=row.correlation_id,
        model_name=row.model_name,
        model_version=row.model_version,
        model_signature=row.model_signature,
    )


def _record(
    event: NewEvent, tenant: str, position: int, stream_version: int, recorded_at: datetime
) -> ChainRecord:
    return ChainRecord(
        position=position,
        tenant=tenant,
        id=event.id,
        source=event.source,
        type=event.type,
        subject=event.subject,
        time=event.time,
        recorded_at=recorded_at,
        stream=event.stream,
        stream_version=stream_version,
        datacontenttype=event.datacontenttype,
        dataschema=event.dataschema,
        has_data=event.has_data,
        data=event.data,
        data_binary=event.data_binary,
        extensions=event.extensions,
        causes=event.causes,
        correlation_id=event.correlation_id,
        model_name=event.model_name,
        model_version=event.model_version,
        model_signature=event.model_signature,
    )


def _row(
    event: NewEvent, tenant: str, record: ChainRecord, prev_hash: bytes, this_hash: bytes
) -> dict[str, Any]:
    if event.data_binary is not None or not event.has_data:
        data: Any = None
    else:
        data = JSON.NULL if event.data is None else event.data
    return {
        "position": record.position,
        "tenant": tenant,
        "id": event.id,
        "source": event.source,
        "type": event.type,
        "subject": event.subject,
        "time": event.time_value,
        "time_rfc3339": event.time,
        "recorded_at": record.recorded_at,
        "stream": event.stream,
        "stream_version": record.stream_version,
        "datacontenttype": event.datacontenttype,
        "dataschema": event.dataschema,
        "data": data,
        "data_binary": event.data_binary,
        "extensions": event.extensions,
        "causes": list(event.causes),
        "correlation_id": event.correlation_id,
        "model_name": event.model_name,
        "model_version": event.model_version,
        "model_signature": event.model_signature,
        "prev_hash": prev_hash,
        "hash": this_hash,
    }


def _compare(event: NewEvent, tenant: str, stored: ChainRecord) -> str | None:
    """None when ``event`` is an exact re-send of ``stored``, else why it conflicts."""
    if event.source != stored.source:
        return f"id {event.id!r} is already used by source {stored.source!r}"
    sent = _record(event, tenant, 0, 0, _EPOCH)
    kept = replace(stored, position=0, stream_version=0, recorded_at=_EPOCH)
    if canonical_bytes(sent) != canonical_bytes(kept):
        return f"event {event.source!r}/{event.id!r} was stored before with other content"
    return None


def _texts(values: set[str]) -> Any:
    """One array parameter, not one parameter per value: a batch may name many ids."""
    return literal(sorted(values), ARRAY(Text))


def _summary(errors: list[dict[str, Any]]) -> str:
    first = errors[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"event {first['index']}: {first['detail']}{more}"
