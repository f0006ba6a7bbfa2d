"""Replay as Apache Parquet: one column per attribute, written a row group at a time.

For rebuilding training data: a data frame library reads the columns without parsing
JSON lines. ``data`` and ``extensions`` stay JSON text (their shape is the producer's);
``data_binary`` holds what a binary-mode event carried; times are UTC timestamps in
microseconds, with the producer's exact ``time`` text beside them (RFC 3339 allows
nanoseconds). Memory stays flat whatever the store's size: rows come from a server-side
cursor, each fetch becomes Arrow columns at once, and a row group (10,000 rows, or 64 MB
of column data if that comes first) is written out as soon as it is full; only the footer
waits for the end. A stream cut short (a lost connection) has no footer, so a reader
refuses it rather than taking it for the whole answer.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ROW_GROUP_ROWS = 10_000
ROW_GROUP_BYTES = 64 << 20

_TIME = pa.timestamp("us", tz="UTC")
# Names as in the NDJSON replay; the order is that of ``COLUMNS`` in ``app.store.reads``.
SCHEMA = pa.schema(
    [
        pa.field("position", pa.int64(), nullable=False),
        pa.field("id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("type", pa.string(), nullable=False),
        pa.field("subject", pa.string()),
        pa.field("time", _TIME),
        pa.field("time_text", pa.string()),
        pa.field("storedtime", _TIME, nullable=False),
        pa.field("stream", pa.string(), nullable=False),
        pa.field("streamversion", pa.int64(), nullable=False),
        pa.field("datacontenttype", pa.string()),
        pa.field("dataschema", pa.string()),
        pa.field("data", pa.string()),
        pa.field("data_binary", pa.binary()),
        pa.field("extensions", pa.string(), nullable=False),
        pa.field("causes", pa.list_(pa.string()), nullable=False),
        pa.field("correlationid", pa.string()),
        pa.field("modelname", pa.string()),
        pa.field("modelversion", pa.string()),
        pa.field("modelsig", pa.string()),
        pa.field("prevhash", pa.binary(32), nullable=False),
        pa.field("hash", pa.binary(32), nullable=False),
    ]
)


class _Spool:
    """The file the writer writes to: it keeps what was written until taken."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        taken = b"".join(self._parts)
        self._parts.clear()
        return taken


async def parquet_file(
    chunks: AsyncIterator[Sequence[tuple[Any, ...]]],
    *,
    row_group_rows: int = ROW_GROUP_ROWS,
    row_group_bytes: int = ROW_GROUP_BYTES,
) -> AsyncGenerator[bytes]:
    """A Parquet file of the rows ``chunks`` give (in ``SCHEMA``'s column order), in
    pieces: the header at once, each row group as soon as it holds ``row_group_rows`` or
    ``row_group_bytes`` of column data, then the footer. Each chunk becomes Arrow columns
    as it arrives, so no more than one row group and one chunk are held."""
    spool = _Spool()
    writer = pq.ParquetWriter(pa.PythonFile(spool, mode="w"), SCHEMA, compression="zstd")
    pending: list[pa.RecordBatch] = []
    rows = size = 0
    try:
        yield spool.take()
        async for chunk in chunks:
            if not chunk:
                continue
            batch = _batch(chunk)
            while batch.num_rows:
                # As many of the chunk's next rows as the group has room for, measured
                # (a chunk can be larger than a group, and its rows of any sizes); one
                # row however large, alone in its group.
                fitting = _fitting(batch, row_group_rows - rows, row_group_bytes - size)
                if fitting or not rows:
                    part = batch.slice(0, max(fitting, 1))
                    batch = batch.slice(part.num_rows)
                    pending.append(part)
                    rows += part.num_rows
                    size += part.nbytes
                    if rows < row_group_rows and size < row_group_bytes and not batch.num_rows:
                        break  # room left: the next chunk may fill it
                writer.write_table(pa.Table.from_batches(pending), row_group_size=rows)
                pending.clear()
                rows = size = 0
                yield spool.take()
        if pending:
            writer.write_table(pa.Table.from_batches(pending), row_group_size=rows)
    finally:
        writer.close()
    yield spool.take()


def _fitting(batch: pa.RecordBatch, rows: int, room_bytes: int) -> int:
    """How many of ``batch``'s first rows, ``rows`` at most, take ``room_bytes`` or less
    of column data (a slice's ``nbytes`` counts the rows it holds)."""
    low, high = 0, min(rows, batch.num_rows)
    while low < high:
        middle = (low + high + 1) // 2
        if batch.slice(0, middle).nbytes <= room_bytes:
            low = middle
        else:
            high = middle - 1
    return low


def _batch(rows: Sequence[tuple[Any, ...]]) -> pa.RecordBatch:
    columns = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [pa.array(values, type=field.type) for values, field in zip(columns, SCHEMA, strict=True)],
        schema=SCHEMA,
    )
