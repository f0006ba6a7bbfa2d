"""Replay throughput: NDJSON over HTTP against a bare psycopg server-side cursor that
encodes the same rows with orjson, on the same data, in the same run; and the server's
peak memory, which must stay flat whatever the size of the store. Then the same for
Parquet: ``format=parquet`` over HTTP against the bare cursor feeding pyarrow's writer
the same columns.

Run: ``python -m bench.replay [--quick] [--events N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import io
import time
from typing import Any

import httpx2
import orjson
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import URL

from app.db.engine import create_engine, libpq_conninfo
from app.store.keys import KeyStore, Scope
from app.store.log import EventLog
from app.store.parquet import ROW_GROUP_ROWS, SCHEMA
from app.store.records import NewEvent
from bench._harness import (
    Row,
    bench_server,
    print_table,
    served,
    settle,
    stored_events,
)
from bench.ingest import DETECTOR

_BASELINE_SQL = """
SELECT position, id, source, type, subject, time_rfc3339, datacontenttype, dataschema,
       data, data_binary, extensions, causes, correlation_id, model_name, model_version,
       model_signature, stream, stream_version, recorded_at, prev_hash, hash
FROM events WHERE tenant = %s ORDER BY position
"""
_PARQUET_SQL = """
SELECT position, id, source, type, subject, time, time_rfc3339, recorded_at, stream,
       stream_version, datacontenttype, dataschema, data::text, data_binary,
       extensions::text, causes, correlation_id, model_name, model_version,
       model_signature, prev_hash, hash
FROM events WHERE tenant = %s ORDER BY position
"""


async def build(url: URL, total: int) -> None:
    engine = create_engine(url, pool_size=1, statement_timeout_ms=0)
    async with engine.begin() as conn:
        await EventLog(conn).append("bench", [DETECTOR])
    for start in range(0, total, 5000):
        batch = [
            NewEvent(
                id=f"e{n}",
                source=f"/cameras/{n % 32}",
                type="com.example.frame.v1",
                stream=f"camera-{n % 32}",
                subject=f"camera-{n % 32}",
                time="2026-11-30T12:00:00.123456Z",
                has_data=True,
                data={"frame": n, "motion": 0.25, "boxes": [[1, 2, 3, 4]], "label": "car"},
                correlation_id=f"run-{n // 100}",
                model_name="detector",
                model_version="3",
            )
            for n in range(start, min(total, start + 5000))
        ]
        async with engine.begin() as conn:
            await EventLog(conn).append("bench", batch)
        if (start // 5000) % 20 == 19:
            print(f"  built {start + len(batch):,} events", flush=True)
    await engine.dispose()


async def make_key(url: URL) -> str:
    engine = create_engine(url, pool_size=1)
    async with engine.begin() as conn:
        key = (await KeyStore(conn).create("bench", frozenset({Scope.READ}))).key
    await engine.dispose()
    return key


def over_http(base: str, key: str) -> tuple[float, int, int]:
    lines = size = 0
    started = time.perf_counter()
    with httpx2.stream(
        "GET", f"{base}/replay", headers={"Authorization": f"Bearer {key}"}, timeout=600
    ) as response:
        for chunk in response.iter_bytes():
            lines += chunk.count(b"\n")
            size += len(chunk)
    return time.perf_counter() - started, lines, size


def parquet_over_http(base: str, key: str) -> tuple[float, int, int]:
    received = io.BytesIO()
    started = time.perf_counter()
    with httpx2.stream(
        "GET",
        f"{base}/replay",
        params={"format": "parquet"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=600,
    ) as response:
        for chunk in response.iter_bytes():
            received.write(chunk)
    elapsed = time.perf_counter() - started
    rows = pq.ParquetFile(received).metadata.num_rows
    return elapsed, rows, received.tell()


def parquet_baseline(url: URL) -> tuple[float, int, int]:
    """A hand-written Parquet exporter: a named cursor, a table of columns per row
    group, and pyarrow's writer, with the same schema and compression."""
    sink = io.BytesIO()
    rows = 0
    started = time.perf_counter()
    with (
        psycopg.connect(libpq_conninfo(url)) as conn,
        conn.cursor(name="export") as cursor,
        pq.ParquetWriter(sink, SCHEMA, compression="zstd") as writer,
    ):
        cursor.execute(_PARQUET_SQL, ("bench",))
        while found := cursor.fetchmany(ROW_GROUP_ROWS):
            columns = list(zip(*found, strict=True))
            arrays = [pa.array(c, type=f.type) for c, f in zip(columns, SCHEMA, strict=True)]
            writer.write_table(pa.Table.from_arrays(arrays, schema=SCHEMA))
            rows += len(found)
    return time.perf_counter() - started, rows, sink.tell()


def baseline(url: URL) -> tuple[float, int, int]:
    """What a hand-written exporter would do: a named cursor and orjson, row by row."""
    lines = size = 0
    started = time.perf_counter()
    with psycopg.connect(libpq_conninfo(url)) as conn, conn.cursor(name="export") as cursor:
        cursor.itersize = 1000
        cursor.execute(_BASELINE_SQL, ("bench",))
        for row in cursor:
            event: dict[str, Any] = {
                "specversion": "1.0", "position": row[0], "id": row[1], "source": row[2],
                "type": row[3], "subject": row[4], "time": row[5], "datacontenttype": row[6],
                "dataschema": row[7], "correlationid": row[12], "modelname": row[13],
                "modelversion": row[14], "modelsig": row[15],
                "causationid": ",".join(row[11]) or None,
                "stream": row[16], "streamversion": row[17],
                "storedtime": row[18].isoformat(), "prevhash": row[19].hex(),
                "hash": row[20].hex(), **row[10],
            }  # fmt: skip
            if row[9] is not None:
                event["data_base64"] = base64.b64encode(row[9]).decode()
            elif row[8] is not None:
                event["data"] = row[8]
            encoded = orjson.dumps({k: v for k, v in event.items() if v is not None}) + b"\n"
            lines += 1
            size += len(encoded)
    return time.perf_counter() - started, lines, size


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small store, for CI")
    parser.add_argument("--events", type=int, default=None)
    args = parser.parse_args()
    total = args.events or (20_000 if args.quick else 1_000_000)

    with bench_server() as server:
        url, built = stored_events(
            server, f"causeway_bench_replay_{total}", total, functools.partial(build, total=total)
        )
        if built:
            with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE events")
        key = asyncio.run(make_key(url))
        base_s, base_lines, base_bytes = baseline(url)
        pq_base_s, pq_base_rows, pq_base_bytes = parquet_baseline(url)
        with served(url) as process:
            settle(process.base, key)
            ours_s, our_lines, our_bytes = over_http(process.base, key)
            peak = process.peak_rss_mb()
            pq_s, pq_rows, pq_bytes = parquet_over_http(process.base, key)
            pq_peak = process.peak_rss_mb()
    assert our_lines == base_lines == total + 1, (our_lines, base_lines, total)  # + registration
    assert pq_rows == pq_base_rows == total + 1, (pq_rows, pq_base_rows, total)
    print_table(
        f"replay: {total:,} events as NDJSON",
        [
            Row("replay rate (events/s)", our_lines / ours_s, base_lines / base_s, "events/s"),
            Row("replay rate (MB/s)", our_bytes / ours_s / 1e6, base_bytes / base_s / 1e6, "MB/s"),
            Row("server peak RSS", peak, None, "MiB", higher_is_better=False),
        ],
        "psycopg named cursor + orjson",
    )
    print_table(
        f"replay: {total:,} events as Parquet (zstd, row groups of {ROW_GROUP_ROWS:,})",
        [
            Row("replay rate (events/s)", pq_rows / pq_s, pq_base_rows / pq_base_s, "events/s"),
            Row("file size", pq_bytes / 1e6, pq_base_bytes / 1e6, "MB", higher_is_better=False),
            Row("server peak RSS after both", pq_peak, None, "MiB", higher_is_better=False),
        ],
        "psycopg named cursor + pyarrow",
    )
    print(f"\ntargets: >= 0.7x the bare cursor ({(our_lines / ours_s) / (base_lines / base_s):.2f}x), "
          f"peak RSS under 300 MiB ({peak:.0f} MiB); Parquet "
          f"{(pq_rows / pq_s) / (pq_base_rows / pq_base_s):.2f}x, peak RSS {pq_peak:.0f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
