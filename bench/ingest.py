"""Ingest throughput: Causeway over HTTP against PostgreSQL's own COPY and against the
``eventsourcing`` library, on the same server, in the same run.

(a) batches of 500 events over 4 keep-alive connections vs COPY of the same rows through
    psycopg into an identical table (same columns, constraints and indexes), and into a
    lean one (the same columns; only the primary key, the unique id and the unique stream
    version), each at its best of one connection and of four (a transaction per 500
    rows): the first says what Causeway adds to writing its rows, the second what the
    read paths' indexes cost on top of a bare log;
(b) single-event POSTs from 32 concurrent keep-alive clients vs ``eventsourcing``'s
    Application API (one event per save) at its best of 32 threads (as many as our
    clients) and 8 (its best here: 1,040-1,120 events/s at 4 and 8 threads against
    680-850 at 32, as its threads share one interpreter), its pool's connections open
    and warm before the clock as Causeway's server is, with latency percentiles;
(c) the single-event load again with 2 and 4 server processes;
(d) the single-event load with tracing on (every request sampled, spans exported over OTLP
    HTTP to a sink in this process that answers 200) and off, in alternating rounds on two
    servers of the same run: the ratio is what tracing costs.

(a) and (b) run in rounds, each round of Causeway next to a round of its baseline: this
machine's speed drifts by half from one minute to the next, and contenders timed minutes
apart gave ratios a third apart.

And the ceiling of (b): the same single-event load on an ASGI app that answers without
doing anything (``bench/_null_app.py``, under uvicorn as ``causeway serve`` is). On a
machine where the load generator, the server and PostgreSQL share the cores, no Python
service gets further than that row's ratio. Last, (b)'s CPU per event, read off ``/proc``:
Causeway's server, PostgreSQL and the load generator, against the library's own process
and PostgreSQL, and the rate each total would allow with every core busy. The load
generator (``bench/_http.py``) is a bare client on uvloop: what it spends, the server and
PostgreSQL cannot.

Run: ``python -m bench.ingest [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from typing import Any

import orjson
import psycopg
from psycopg.types.json import Jsonb
from sqlalchemy import URL

from app.db.engine import create_engine, libpq_conninfo
from app.store.append.planning import GroupPlan
from app.store.append.planning import Row as PlannedRow
from app.store.chain import GENESIS_HASH
from app.store.keys import KeyStore, Scope
from app.store.log import EventLog
from app.store.model_registry import Signature, registration_event, registration_from
from app.store.records import NewEvent
from bench._harness import (
    NO_CPU,
    CpuMeter,
    CpuTimes,
    Row,
    bench_server,
    checkpoint,
    ensure_database,
    percentile,
    print_table,
    served,
    serving,
    serving_null_app,
    settle,
)
from bench._http import Connection, run

_ids = count()
DETECTOR = registration_event(
    "detector",
    "3",
    Signature.model_validate({"inputs": [{"type": "binary"}], "outputs": [{"type": "string"}]}),
    {},
    enforce_outputs=False,
)


def cloudevent(prefix: str) -> dict[str, Any]:
    n = next(_ids)
    return {
        "specversion": "1.0",
        "id": f"{prefix}-{n}",
        "source": f"/bench/cameras/{n % 64}",
        "type": "com.example.frame.v1",
        "subject": f"camera-{n % 64}",
        "time": "2026-11-30T12:00:00.123456Z",
        "correlationid": f"run-{n // 100}",
        "modelname": "detector",
        "modelversion": "3",
        "data": {"frame": n, "motion": 0.5, "boxes": [[10, 20, 30, 40]], "label": "person"},
    }


async def make_key(url: URL) -> str:
    """A key for tenant ``bench`` (ingest, and read for the projections' status), whose
    events name model ``detector`` version 3."""
    engine = create_engine(url, pool_size=1)
    async with engine.begin() as conn:
        key = (await KeyStore(conn).create("bench", frozenset({Scope.INGEST, Scope.READ}))).key
        await EventLog(conn).append("bench", [DETECTOR])
    await engine.dispose()
    return key


# (a) ------------------------------------------------------------------------------------


def copy_rows(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The rows Causeway would write for ``events``, built before the clock starts."""
    batch = [
        NewEvent(
            id=e["id"],
            source=e["source"],
            type=e["type"],
            stream=e["subject"],
            subject=e["subject"],
            time=e["time"],
            datacontenttype=None,
            has_data=True,
            data=e["data"],
            correlation_id=e["correlationid"],
            model_name=e["modelname"],
            model_version=e["modelversion"],
        )
        for e in events
    ]
    registered = {
        ("bench", "detector", "3"): registration_from(DETECTOR.data, DETECTOR.model_signature or "")
    }
    plan = GroupPlan(0, GENESIS_HASH, {}, {}, {}, datetime.now(UTC), registered)
    outcome = plan.plan("bench", batch)
    assert isinstance(outcome, list), outcome
    return [_baseline_row(row, plan.recorded_at) for row in plan.rows]


def _baseline_row(r: PlannedRow, at: datetime) -> tuple[Any, ...]:
    """The values of one ``events`` row, for psycopg's own COPY adapters."""
    e = r.event
    return (
        r.position, r.tenant, e.id, e.source, e.type, e.subject, e.time_value, e.time, at,
        e.stream, r.stream_version, None, None, Jsonb(e.data, dumps=_json_text), None,
        Jsonb(e.extensions, dumps=_json_text), list(e.causes), e.correlation_id, e.model_name,
        e.model_version, e.model_signature, r.prev_hash, r.hash,
    )  # fmt: skip


def _json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


def copy_seconds(
    conns: list[psycopg.Connection[Any]], statement: str, rows: list[tuple[Any, ...]]
) -> float:
    """How long ``statement`` (a COPY ... FROM STDIN) takes for ``rows``, 500 to a
    transaction, as Causeway's batches of (a), the batches shared out over ``conns``
    (a thread each, as (a) sends them over as many connections)."""
    batches = [rows[i : i + 500] for i in range(0, len(rows), 500)]

    def copy_on(n: int) -> None:
        conn = conns[n]
        for batch in batches[n :: len(conns)]:
            with conn.transaction(), conn.cursor() as cursor, cursor.copy(statement) as copy:
                for row in batch:
                    copy.write_row(row)

    started = time.perf_counter()
    with ThreadPoolExecutor(len(conns)) as pool:
        list(pool.map(copy_on, range(len(conns))))
    return time.perf_counter() - started


class CopyBaseline:
    """psycopg's COPY of the rows Causeway would write, into a table that grows over the
    rounds as the store does: like ``events`` (same columns, constraints and indexes), or
    ``lean``: the same columns with only what an append-only log cannot do without (the
    primary key on position, the unique event id, the unique stream version). The lean
    one is what a bare log costs; the difference is what the read paths' indexes cost."""

    def __init__(self, url: URL, *, lean: bool = False) -> None:
        self._url = url
        self._table = "copy_lean" if lean else "copy_baseline"
        self._conn = psycopg.connect(libpq_conninfo(url), autocommit=True)
        self._more = [psycopg.connect(libpq_conninfo(url), autocommit=True) for _ in range(3)]
        self._conn.execute(f"DROP TABLE IF EXISTS {self._table}")
        if lean:
            self._conn.execute(
                f"CREATE TABLE {self._table} (LIKE events INCLUDING DEFAULTS INCLUDING"
                " CONSTRAINTS, PRIMARY KEY (position), UNIQUE (tenant, id),"
                " UNIQUE (tenant, stream, stream_version))"
            )
        else:
            self._conn.execute(f"CREATE TABLE {self._table} (LIKE events INCLUDING ALL)")
        columns = [
            r[0]
            for r in self._conn.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'events' ORDER BY ordinal_position"
            )
        ]
        self._statement = f"COPY {self._table} ({', '.join(columns)}) FROM STDIN"

    def seconds(self, rows: list[tuple[Any, ...]]) -> float:
        """How long COPY takes for ``rows``, 500 to a transaction, at its best of one
        connection and of four (as many as (a) has): half the rows each way, each timed
        on its own and counted as though it had taken them all."""
        half = len(rows) // 2
        checkpoint(self._url)
        alone = copy_seconds([self._conn], self._statement, rows[:half])
        checkpoint(self._url)
        four = copy_seconds([self._conn, *self._more], self._statement, rows[half:])
        return min(alone / max(half, 1), four / max(len(rows) - half, 1)) * len(rows)

    def close(self) -> None:
        self._conn.execute(f"DROP TABLE {self._table}")
        for conn in (self._conn, *self._more):
            conn.close()


async def http_batches(base: str, key: str, events: list[dict[str, Any]], clients: int) -> float:
    headers = {
        "Authorization": f"Bearer {key}",
        "Content-Type": "application/cloudevents-batch+json",
    }
    bodies = [orjson.dumps(events[i : i + 500]) for i in range(0, len(events), 500)]
    queue = list(reversed(bodies))

    async def client() -> None:
        conn = await Connection.open(base)
        while queue:
            status, answer = await conn.post("/events", queue.pop(), headers)
            assert status == 201, answer
        await conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return len(events) / (time.perf_counter() - started)


# (b) ------------------------------------------------------------------------------------


async def http_singles(
    base: str, key: str, events: list[dict[str, Any]], clients: int
) -> tuple[float, list[float]]:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/cloudevents+json"}
    bodies = [orjson.dumps(e) for e in events]
    queue = list(reversed(bodies))
    latencies: list[float] = []

    async def client() -> None:
        conn = await Connection.open(base)
        while queue:
            body = queue.pop()
            t0 = time.perf_counter()
            status, answer = await conn.post("/events", body, headers)
            latencies.append((time.perf_counter() - t0) * 1000)
            assert status == 201, answer
        await conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return len(events) / (time.perf_counter() - started), latencies


@functools.cache
def _frame() -> type[Any]:
    """The library's aggregate for one frame: defined once, as the library registers each
    class under its name."""
    from eventsourcing.domain import Aggregate, event

    class Frame(Aggregate):
        @event("Recorded")
        def __init__(self, payload: dict[str, Any]) -> None:
            self.payload = payload

    return Frame


def eventsourcing_baseline(
    url: URL, events: list[dict[str, Any]], threads: int, meter: CpuMeter | None = None
) -> tuple[float, CpuTimes]:
    """The library's rate at ``threads`` threads, once its pool's connections are open
    and warm (a few saves a thread before the clock, as Causeway's server is warm), and
    the CPU the timed saves took (with ``meter``; its own process and PostgreSQL's)."""
    from eventsourcing.application import Application

    frame = _frame()
    host = url.host or str(url.query.get("host"))
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": url.database or "",
        "POSTGRES_HOST": host,
        "POSTGRES_PORT": str(url.port or 5432),
        "POSTGRES_USER": url.username or "postgres",
        "POSTGRES_PASSWORD": url.password or "",
        "POSTGRES_POOL_SIZE": str(threads),
        "CREATE_TABLE": "y",
    }
    app: Application[Any] = Application(env=env)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda n: app.save(frame({"warm": n})), range(threads * 4)))
        before = meter.read() if meter is not None else NO_CPU
        started = time.perf_counter()
        list(pool.map(lambda e: app.save(frame(e["data"])), events))
        rate = len(events) / (time.perf_counter() - started)
        cpu = meter.read() - before if meter is not None else NO_CPU
    app.close()
    return rate, cpu


# ---------------------------------------------------------------------------------------


def cpu_rows(ours: CpuTimes, theirs: CpuTimes, events: int) -> list[Row]:
    """Where (b)'s cores went, per event, and the rate that CPU would allow with every core
    busy. The load generator shares the cores with Causeway; the library runs in the bench
    process itself, so its column's "process" is the library. PostgreSQL's figure is all
    of its processes over the round: with the backends the library opens and closes each
    round, and whatever autovacuum or the checkpointer did meanwhile, so it moves from run
    to run more than the others do."""
    cores = CpuMeter.cores()

    def us(seconds: float) -> float:
        return seconds / events * 1e6

    ours_all, theirs_all = (
        ours.server + ours.database + ours.client,
        theirs.database + theirs.client,
    )
    return [
        Row("(b) CPU per event: Causeway's server", us(ours.server), None, "us"),
        Row("(b) CPU per event: PostgreSQL", us(ours.database), us(theirs.database), "us"),
        Row(
            "(b) CPU per event: load generator / the library",
            us(ours.client),
            us(theirs.client),
            "us",
        ),
        Row("(b) CPU per event: all", us(ours_all), us(theirs_all), "us"),
        Row(
            f"(b) rate that CPU allows, {cores} cores all busy",
            cores * events / ours_all,
            cores * events / theirs_all,
            "events/s",
        ),
    ]


def tracing_cost(url: URL, base: str, key: str, events: int, rounds: int) -> tuple[float, float]:
    """Single-event ingest rates with tracing on (a second server, whose spans go to
    ``_SpanSink``) and off (``base``), in alternating rounds; events per second, each."""
    on_s = off_s = 0.0
    with _SpanSink() as endpoint, served(url, extra_env=endpoint) as traced:
        settle(traced.base, key)  # a fresh server reads the store first
        warm = [cloudevent("d-warm") for _ in range(500)]  # a fresh server, as warm as base
        run(http_singles(traced.base, key, warm, clients=32))
        for n in range(rounds):
            checkpoint(url)
            off = [cloudevent(f"d-off{n}") for _ in range(events // rounds)]
            off_s += len(off) / run(http_singles(base, key, off, clients=32))[0]
            checkpoint(url)
            on = [cloudevent(f"d-on{n}") for _ in range(events // rounds)]
            on_s += len(on) / run(http_singles(traced.base, key, on, clients=32))[0]
    done = events // rounds * rounds
    return done / on_s, done / off_s


class _SpanSink:
    """An OTLP/HTTP trace receiver that answers every export with 200 and keeps nothing,
    in a thread of this process; entered, the ``OTEL_*`` variables that point a server at
    it."""

    def __enter__(self) -> dict[str, str]:
        class Answer(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        port = self._server.server_address[1]
        return {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port}/v1/traces",
            "OTEL_SERVICE_NAME": "causeway-bench",
        }

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _rounds(items: list[dict[str, Any]], rounds: int) -> list[list[dict[str, Any]]]:
    size = -(-len(items) // rounds)
    return [items[i : i + size] for i in range(0, len(items), size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, for CI")
    parser.add_argument("--batch-events", type=int, default=None)
    parser.add_argument("--single-events", type=int, default=None)
    args = parser.parse_args()
    batch_events = args.batch_events or (5_000 if args.quick else 200_000)
    single_events = args.single_events or (1_000 if args.quick else 20_000)

    # The machine's speed drifts from one minute to the next, so each contender runs in
    # rounds, alternating with its baseline, and each rate is over all of its rounds.
    rounds = 1 if args.quick else 4
    with bench_server() as server:
        url, _ = ensure_database(server, "causeway_bench_ingest", fresh=True)
        key = asyncio.run(make_key(url))

        batch = [cloudevent("b") for _ in range(batch_events)]
        single = [cloudevent("s1") for _ in range(single_events)]
        theirs = [cloudevent("es") for _ in range(single_events)]
        theirs_8 = [cloudevent("es8") for _ in range(single_events)]
        copy_s = lean_s = batch_s = single_s = es_s = es8_s = 0.0
        latencies: list[float] = []
        baseline, lean = CopyBaseline(url), CopyBaseline(url, lean=True)
        meter = CpuMeter(url)
        our_cpu = their_cpu = NO_CPU
        with served(url) as server_process:
            base = server_process.base
            rows = copy_rows(batch)  # one chain, as Causeway's: positions go on across rounds
            for part in _rounds(batch, rounds):
                copy_s += baseline.seconds(rows[: len(part)])
                lean_s += lean.seconds(rows[: len(part)])
                del rows[: len(part)]
                checkpoint(url)
                batch_s += len(part) / run(http_batches(base, key, part, clients=4))
                # The server's projections follow the log: what a round appended would
                # otherwise be read during the next COPY round, or during (b) (the rounds
                # of (b) pay for their own events).
                settle(base, key)
            for ours, es, es8 in zip(
                _rounds(single, rounds),
                _rounds(theirs, rounds),
                _rounds(theirs_8, rounds),
                strict=True,
            ):
                checkpoint(url)
                before = meter.read(server_process.pid)
                rate, lat = run(http_singles(base, key, ours, clients=32))
                our_cpu += meter.read(server_process.pid) - before
                single_s += len(ours) / rate
                latencies += lat
                checkpoint(url)
                es_rate_32, es_cpu = eventsourcing_baseline(url, es, 32, meter)
                es_s += len(es) / es_rate_32
                their_cpu += es_cpu
                checkpoint(url)
                es8_s += len(es8) / eventsourcing_baseline(url, es8, 8)[0]
            traced_rate, untraced_rate = tracing_cost(url, base, key, single_events, rounds)
        baseline.close()
        lean.close()
        copy_rate, batch_rate = batch_events / copy_s, batch_events / batch_s
        lean_rate = batch_events / lean_s
        single_rate, es32_rate = single_events / single_s, single_events / es_s
        es8_rate = single_events / es8_s
        es_threads, es_rate = max((32, es32_rate), (8, es8_rate), key=lambda best: best[1])
        with serving_null_app() as base:
            nothing = [cloudevent("n") for _ in range(single_events)]
            ceiling_rate, ceiling_latencies = run(http_singles(base, key, nothing, 32))
        workers_rows = []
        for workers in (2, 4):
            with serving(url, workers=workers) as base:
                settle(base, key)  # a fresh server reads the store first
                events = [cloudevent(f"w{workers}") for _ in range(single_events)]
                checkpoint(url)
                rate, lat = run(http_singles(base, key, events, clients=32))
            workers_rows += [
                Row(f"(c) single POSTs, {workers} workers", rate, es_rate, "events/s"),
                Row(f"(c) latency p50, {workers} workers", percentile(lat, 50), None, "ms"),
                Row(f"(c) latency p99, {workers} workers", percentile(lat, 99), None, "ms"),
            ]

    print_table(
        f"ingest (a): {batch_events:,} events in batches of 500 over 4 connections, "
        f"{rounds} rounds alternating with COPY",
        [Row("(a) HTTP batch ingest vs COPY", batch_rate, copy_rate, "events/s")],
        "psycopg COPY into a table like events",
    )
    print_table(
        "ingest (a), lean: the same rounds against COPY into a table with only the primary "
        "key, the unique id and the unique stream version",
        [Row("(a) HTTP batch ingest vs lean COPY", batch_rate, lean_rate, "events/s")],
        "psycopg COPY into a lean table",
    )
    print_table(
        f"ingest (b, c): {single_events:,} single-event POSTs from 32 clients; (b) in "
        f"{rounds} rounds alternating with eventsourcing",
        [
            Row("(b) single POSTs, 1 worker", single_rate, es_rate, "events/s"),
            Row("(b) latency p50", percentile(latencies, 50), None, "ms"),
            Row("(b) latency p99", percentile(latencies, 99), None, "ms"),
            *workers_rows,
            Row("(b) ceiling: an ASGI app that does nothing", ceiling_rate, es_rate, "events/s"),
            Row("(b) ceiling latency p50", percentile(ceiling_latencies, 50), None, "ms"),
            Row("(b) eventsourcing itself, 32 threads", es32_rate, None, "events/s"),
            Row("(b) eventsourcing itself, 8 threads", es8_rate, None, "events/s"),
            *cpu_rows(our_cpu, their_cpu, single_events),
        ],
        f"eventsourcing, best ({es_threads} threads; CPU rows: 32 threads)",
    )
    print_table(
        f"ingest (d): {single_events:,} single-event POSTs from 32 clients with tracing on "
        f"(OTLP HTTP, parentbased_always_on), {rounds} rounds alternating with it off",
        [Row("(d) single POSTs, tracing on", traced_rate, untraced_rate, "events/s")],
        "tracing off",
    )
    print(f"\ntargets: (a) >= 0.5x COPY ({batch_rate / copy_rate:.2f}x; "
          f"{batch_rate / lean_rate:.2f}x the lean COPY, >= 0.6x wanted), "
          f"(b) >= 10x eventsourcing at its best ({single_rate / es_rate:.2f}x; "
          f"{single_rate / es32_rate:.2f}x its 32 threads; an app that does "
          f"nothing reaches {ceiling_rate / es_rate:.2f}x here)")  # fmt: skip


if __name__ == "__main__":
    main()
