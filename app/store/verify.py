"""Re-checks the hash chain from the first event, in constant memory.

Every row must follow its predecessor (``position`` dense, ``prev_hash`` equal to the
previous ``hash``) and its ``hash`` must equal ``SHA-256(prev_hash || canonical(row))``.
The ``log_head`` row must name the last event. What the store keeps beside the hashed
content must follow from it: the ``time`` column (which filters read) is the hashed
``time`` text's instant, and the causal graph (``event_causes``, which walks read) holds
exactly one edge for each cause an event was hashed with. The first break is reported.

A chain rewritten from some event to the head, head included, checks out on its own. So
a verification can take anchors: hashes kept outside the database (a head an earlier
verification printed), each of which the chain must still carry at its position.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, select, text
from sqlalchemy.exc import DataError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncResult

from app.db.tables import events, log_head
from app.store.chain import GENESIS_HASH, seals
from app.store.log import full_row, record_from_row
from app.store.timestamps import parse_rfc3339

# The first effect whose edges in event_causes are not the causes it was hashed with: a
# named cause with no edge (or no such event in its tenant), or an edge its effect does
# not name. Set-based, in the walk's snapshot.
_EDGES_DIFFER = text("""
    SELECT min(position) FROM (
        SELECT effect.position
        FROM events AS effect
        CROSS JOIN LATERAL unnest(effect.causes) AS named (id)
        LEFT JOIN events AS cause ON cause.tenant = effect.tenant AND cause.id = named.id
        LEFT JOIN event_causes AS edge
               ON edge.effect = effect.position AND edge.cause = cause.position
        WHERE edge.effect IS NULL
      UNION ALL
        SELECT edge.effect
        FROM event_causes AS edge
        LEFT JOIN events AS effect ON effect.position = edge.effect
        LEFT JOIN events AS cause ON cause.position = edge.cause
        WHERE effect.position IS NULL OR cause.position IS NULL
           OR cause.tenant <> effect.tenant OR NOT cause.id = ANY (effect.causes)
    ) AS differ (position)
""")


@dataclass(frozen=True, slots=True)
class ChainReport:
    count: int
    head_hash: bytes
    bad_position: int | None = None
    reason: str | None = None

    @property
    def is_intact(self) -> bool:
        return self.bad_position is None and self.reason is None


async def verify_chain(
    conn: AsyncConnection, *, anchors: Mapping[int, bytes] | None = None, fetch_rows: int = 1000
) -> ChainReport:
    """Walk every event in position order; ``conn`` should be in a REPEATABLE READ
    transaction so the walk and the head check see one snapshot. ``anchors`` maps
    positions to the hash each must have."""
    anchors = anchors or {}
    expected_position, prev_hash, count = 1, GENESIS_HASH, 0
    result = await conn.stream(
        select(*full_row()).order_by(events.c.position).execution_options(yield_per=fetch_rows)
    )
    try:
        async for row in _rows(result):
            if row is None:  # a fetch held a value no event of the store's can hold
                reason = (
                    "content cannot be read (a time past what the store writes), here or "
                    f"in the {fetch_rows - 1} events after"
                )
                return _broken(count, prev_hash, expected_position, reason)
            if row.position != expected_position:
                return _broken(count, prev_hash, expected_position, "position missing from the log")
            if bytes(row.prev_hash) != prev_hash:
                return _broken(count, prev_hash, row.position, "prev_hash does not match")
            if not seals(bytes(row.hash), prev_hash, record_from_row(row)):
                return _broken(count, prev_hash, row.position, "hash does not match the content")
            if anchors.get(row.position, row.hash) != bytes(row.hash):
                return _broken(count, prev_hash, row.position, "hash differs from the anchor")
            if not _time_follows(row.time, row.time_rfc3339):
                return _broken(count, prev_hash, row.position, "time differs from the hashed time")
            prev_hash, count, expected_position = bytes(row.hash), count + 1, expected_position + 1
    finally:
        await result.close()
    if anchors and max(anchors) > count:
        return _broken(
            count, prev_hash, None, f"the log ends before the anchor at position {max(anchors)}"
        )
    head = (await conn.execute(select(log_head.c.position, log_head.c.hash))).one_or_none()
    if head is None:
        return _broken(count, prev_hash, None, "the log head row is missing")
    if head.position != count or bytes(head.hash) != prev_hash:
        return _broken(count, prev_hash, None, f"log head names position {head.position}")
    differs = (await conn.execute(_EDGES_DIFFER)).scalar()
    if differs is not None:
        return _broken(
            count, prev_hash, differs, "causal edges differ from the causes it was hashed with"
        )
    return ChainReport(count=count, head_hash=prev_hash)


async def _rows(result: AsyncResult[Any]) -> AsyncIterator[Row[Any] | None]:
    """The rows of ``result``; a last None when a fetch had a value psycopg cannot load
    (``infinity`` in a timestamp column: the store never writes one)."""
    try:
        async for row in result:
            yield row
    except DataError:
        yield None


async def read_head(conn: AsyncConnection) -> tuple[int, bytes]:
    """The log's head as the log records it: the last position (0 for an empty log) and
    its hash (``GENESIS_HASH`` then). What an anchor keeps."""
    head = (await conn.execute(select(log_head.c.position, log_head.c.hash))).one_or_none()
    return (0, GENESIS_HASH) if head is None else (int(head.position), bytes(head.hash))


def _time_follows(stored: datetime | None, hashed: str | None) -> bool:
    """Whether the ``time`` column is the instant of the hashed ``time`` text. (A text
    that today's parser refuses, stored before it was as strict, proves nothing.)"""
    if hashed is None:
        return stored is None
    instant, _ = parse_rfc3339(hashed)
    return instant is None or stored == instant


def _broken(count: int, head: bytes, position: int | None, reason: str) -> ChainReport:
    return ChainReport(count=count, head_hash=head, bad_position=position, reason=reason)
