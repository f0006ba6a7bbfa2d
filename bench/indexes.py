"""What each index on ``events`` costs a write: psycopg's COPY of the rows Causeway would
write into a lean table (the primary key on position, the unique event id and the unique
stream version: what an append-only log cannot do without), into the lean table with
one of the read paths' indexes added, each in turn, and into a table with every index of
``events``, in rounds that alternate between them (this machine's speed drifts from one
minute to the next). Each read-path index serves a documented filter of the log's reads;
``app/db/tables.py`` names the query beside each.

The figure per index is the COPY rate with it against the lean table's, and what it adds
to each row in microseconds: the sum over the indexes is about what the full table
costs more than the lean one (``bench/ingest.py`` (a), lean).

Run: ``python -m bench.indexes [--quick]``.
"""

from __future__ import annotations

import argparse
from typing import Any

import psycopg
from sqlalchemy import URL

from app.db.engine import libpq_conninfo
from bench._harness import bench_server, checkpoint, ensure_database
from bench.ingest import cloudevent, copy_rows, copy_seconds

# The unique constraints of the lean table, whose indexes every variant has.
_LEAN = ("events_pkey", "events_tenant_id_key", "events_tenant_stream_stream_version_key")


class IndexedCopy:
    """A table with the columns of ``events``, the lean constraints and ``indexes`` (the
    definitions of indexes of ``events``), and COPY into it."""

    def __init__(self, conn: psycopg.Connection[Any], name: str, indexes: list[str]) -> None:
        self._conn = conn
        self.name = name
        self._table = f"copy_{name}"
        conn.execute(f'DROP TABLE IF EXISTS "{self._table}"')
        conn.execute(
            f'CREATE TABLE "{self._table}" (LIKE events INCLUDING DEFAULTS INCLUDING'
            " CONSTRAINTS, PRIMARY KEY (position), UNIQUE (tenant, id),"
            " UNIQUE (tenant, stream, stream_version))"
        )
        for n, definition in enumerate(indexes):
            on_copy = definition.split(" ON ", 1)[1].replace("public.events", f'"{self._table}"', 1)
            conn.execute(f'CREATE INDEX "{self._table}_{n}" ON {on_copy}')
        self._statement = f'COPY "{self._table}" ({", ".join(_columns(conn))}) FROM STDIN'

    def seconds(self, rows: list[tuple[Any, ...]]) -> float:
        """How long COPY takes for ``rows``, 500 to a transaction (as Causeway's batches)."""
        return copy_seconds([self._conn], self._statement, rows)

    def drop(self) -> None:
        self._conn.execute(f'DROP TABLE "{self._table}"')


def _columns(conn: psycopg.Connection[Any]) -> list[str]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'events' ORDER BY ordinal_position"
        )
    ]


def read_path_indexes(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """The indexes of ``events`` beyond the lean ones: name -> definition."""
    found = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'events' ORDER BY indexname"
    ).fetchall()
    return {name: definition for name, definition in found if name not in _LEAN}


def measure(url: URL, events: int, rounds: int) -> list[tuple[str, float, float]]:
    with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
        indexes = read_path_indexes(conn)
        variants = [IndexedCopy(conn, "lean", [])]
        variants += [IndexedCopy(conn, name, [d]) for name, d in indexes.items()]
        variants.append(IndexedCopy(conn, "all", list(indexes.values())))
        rows = copy_rows([cloudevent("i") for _ in range(events)])
        seconds = dict.fromkeys((v.name for v in variants), 0.0)
        per_round = -(-len(rows) // rounds)
        for start in range(0, len(rows), per_round):
            part = rows[start : start + per_round]
            for variant in variants:
                checkpoint(url)
                seconds[variant.name] += variant.seconds(part)
        for variant in variants:
            variant.drop()
    lean_rate = events / seconds["lean"]
    table = [("lean: primary key, unique id, unique stream version", lean_rate, 0.0)]
    for name in [*indexes, "all"]:
        extra_us = (seconds[name] - seconds["lean"]) / events * 1e6
        table.append((name, events / seconds[name], extra_us))
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, for CI")
    args = parser.parse_args()
    events, rounds = (5_000, 1) if args.quick else (100_000, 4)
    with bench_server() as server:
        url, _ = ensure_database(server, "causeway_bench_indexes", fresh=True)
        table = measure(url, events, rounds)
    lean_rate = table[0][1]
    print(
        f"\nindexes: COPY of {events:,} events into each table, 500 a transaction, {rounds}"
        " rounds alternating between the tables"
    )
    print("| table | COPY | vs the lean table | added per row |")
    print("|---|---|---|---|")
    for name, rate, extra_us in table:
        label = (
            name
            if name.startswith("lean")
            else ("every index of events" if name == "all" else f"lean + {name}")
        )
        print(f"| {label} | {rate:,.0f} rows/s | {rate / lean_rate:.2f}x | {extra_us:.1f} us |")


if __name__ == "__main__":
    main()
