"""Scheduler throughput: lease + complete by worker processes over HTTP, against a bare
``FOR UPDATE SKIP LOCKED`` loop on an identical table, in the same run.

The tasks are made the real way: trigger events are appended and the dispatcher routes
them. The baseline then gets a copy of the task table (same rows, same indexes) and
worker processes that lease (``SELECT ... FOR UPDATE SKIP LOCKED`` + ``UPDATE``) and
complete (``UPDATE``) in two transactions, as Causeway's workers do; what it leaves out is
what Causeway adds: HTTP, keys, and every decision appended to the hash-chained log.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime

import psycopg
from sqlalchemy import URL, func, select

from app.db.engine import create_engine, libpq_conninfo
from app.db.tables import tasks
from app.projections.runner import ProjectionRunner
from app.store.keys import KeyStore, Scope
from app.store.log import EventLog
from app.store.records import NewEvent
from bench._harness import Row, bench_server, ensure_database, print_table, serving
from ingest.client import CausewayClient
from scheduler import tasks as t
from scheduler.projections import scheduler_projections
from scheduler.routes import define_event, parse_route
from scheduler.rows.tasks import write_task

TENANT = "bench"
QUEUE = "inference"


async def seed(url: URL, count: int, dispatched: int) -> tuple[str, float]:
    """``count`` ready tasks in ``QUEUE``; a worker key; the dispatcher's rate.

    The first ``dispatched`` tasks are made the real way (trigger events appended, the
    dispatcher routing them) and timed; the rest are the same decisions appended in
    batches of 1,000, so a queue of 100,000 takes seconds, not minutes, to build.
    """
    engine = create_engine(url, pool_size=2)
    route = parse_route(
        {"id": "frames", "types": ["bench.frame"], "kind": "detect", "queue": QUEUE}
    )
    async with engine.begin() as conn:
        key = (await KeyStore(conn).create(TENANT, frozenset({Scope.WORKER}))).key
        [defined] = await EventLog(conn).append(TENANT, [define_event(route)])
    for start in range(0, count, 1000):
        batch = [frame(n) for n in range(start, min(start + 1000, count))]
        async with engine.begin() as conn:
            await EventLog(conn).append(TENANT, batch)
    runner = ProjectionRunner(engine, scheduler_projections(), batch_size=dispatched or 1)
    dispatcher = runner.projection("scheduler-dispatch")
    await runner.step(dispatcher, until=defined.position)  # the route: its batch ends there
    started = time.perf_counter()
    await runner.step(dispatcher, until=defined.position + dispatched)  # `dispatched` frames
    rate = dispatched / (time.perf_counter() - started)
    spec = {**route.as_json(), "requires": route.requires.as_json()}
    now = datetime.now(UTC)
    for start in range(dispatched, count, 1000):
        made = [
            t.created(
                tenant=TENANT,
                task_id=t.task_id_for(TENANT, route.id, f"frame-{n}"),
                route=spec,
                priority=5,
                trigger={
                    "id": f"frame-{n}",
                    "type": "bench.frame",
                    "source": "/bench/cameras/1",
                    "time": now.isoformat(),
                },
                debounce_key=None,
                at=now,
            )
            for n in range(start, min(start + 1000, count))
        ]
        async with engine.begin() as conn:
            appended = await EventLog(conn).append(TENANT, made)
            for event, where in zip(made, appended, strict=True):
                await write_task(conn, t.fold(None, event.type, event.data, where.position))
    # Every scheduler projection has caught up before the clock starts: the dispatcher
    # has nothing left to route (every frame has its task), and the task book has read
    # the decisions written above. A server started on a store whose projections lag
    # reads that backlog first, and the workers would be timed against its catch-up.
    for projection in scheduler_projections():
        await runner.catch_up(runner.projection(projection.name))
    async with engine.connect() as conn:
        found = (await conn.execute(select(func.count()).select_from(tasks))).scalar_one()
    await engine.dispose()
    if found != count:
        raise RuntimeError(f"{found} tasks were made, not {count}")
    return key, rate


def frame(n: int) -> NewEvent:
    return NewEvent(
        id=f"frame-{n}",
        source="/bench/cameras/1",
        type="bench.frame",
        stream="bench-frames",
        has_data=True,
        data={"frame": n},
    )


def copy_table(url: URL) -> None:
    with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_tasks")
        conn.execute("CREATE TABLE bench_tasks (LIKE tasks INCLUDING ALL)")
        conn.execute("INSERT INTO bench_tasks SELECT * FROM tasks")
        conn.execute("VACUUM ANALYZE bench_tasks")


def run_workers(args: list[str], workers: int, ops: int) -> tuple[float, int]:
    """Start ``workers`` copies of this script in worker mode, each to lease and complete
    ``ops / workers`` tasks; wall time and tasks done."""
    each = str(ops // workers)
    started = time.perf_counter()
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.scheduler", *args, "--name", f"w{n}", "--ops", each],
            stdout=subprocess.PIPE,
        )
        for n in range(workers)
    ]
    done = 0
    for process in processes:
        out, _ = process.communicate(timeout=3600)
        if process.returncode != 0:
            raise RuntimeError("a worker failed")
        done += int(out.strip() or 0)
    return time.perf_counter() - started, done


def causeway_worker(base: str, key: str, name: str, ops: int) -> int:
    done = 0
    with CausewayClient(base, key) as client:
        while done < ops and (lease := client.lease(QUEUE, name)) is not None:
            client.complete(lease)
            done += 1
    return done


def bare_worker(dsn: str, name: str, ops: int) -> int:
    done = 0
    with psycopg.connect(dsn) as conn:
        while done < ops:
            with conn.transaction():
                row = conn.execute(
                    "SELECT id FROM bench_tasks WHERE tenant = %s AND queue = %s "
                    "AND state = 'ready' AND available_at <= now() "
                    "ORDER BY priority DESC, seq LIMIT 1 FOR UPDATE SKIP LOCKED",
                    (TENANT, QUEUE),
                ).fetchone()
                if row is None:
                    return done
                conn.execute(
                    "UPDATE bench_tasks SET state = 'leased', worker = %s, lease_id = %s, "
                    "attempts = attempts + 1, leased_at = now(), "
                    "lease_expires_at = now() + interval '30 seconds' "
                    "WHERE tenant = %s AND id = %s",
                    (name, uuid.uuid4().hex, TENANT, row[0]),
                )
            with conn.transaction():
                conn.execute(
                    "UPDATE bench_tasks SET state = 'completed', finished_at = now(), "
                    "lease_id = NULL WHERE tenant = %s AND id = %s",
                    (TENANT, row[0]),
                )
            done += 1
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, for CI")
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument(
        "--ops", type=int, default=None, help="tasks each side leases and completes"
    )
    # Worker mode, used by the benchmark itself.
    parser.add_argument("--causeway", nargs=2, metavar=("BASE", "KEY"), help=argparse.SUPPRESS)
    parser.add_argument("--bare", metavar="DSN", help=argparse.SUPPRESS)
    parser.add_argument("--name", default="w", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.causeway:
        base, key = args.causeway
        print(causeway_worker(base, key, args.name, args.ops))
        return
    if args.bare:
        print(bare_worker(args.bare, args.name, args.ops))
        return

    count = args.tasks or (500 if args.quick else 100_000)
    workers = args.workers or (2 if args.quick else 8)
    ops = args.ops or (100 if args.quick else 10_000)
    dispatched = min(count, 100 if args.quick else 2_000)
    rows: list[Row] = []
    with bench_server() as server:
        url, _ = ensure_database(server, "causeway_bench_scheduler", fresh=True)
        key, dispatch_rate = asyncio.run(seed(url, count, dispatched))
        copy_table(url)
        bare_s, bare_done = run_workers(["--bare", libpq_conninfo(url)], workers, ops)
        bare_rate = bare_done / bare_s
        for processes in (1, 2):
            with serving(url, workers=processes) as base:
                ours_s, ours_done = run_workers(["--causeway", base, key], workers, ops)
            if ours_done != bare_done:
                raise RuntimeError(f"done: bare {bare_done}, Causeway {ours_done}")
            figure = f"lease + complete, {workers} workers, {processes} server process(es)"
            rows.append(Row(figure, ours_done / ours_s, bare_rate, "tasks/s"))
    rows.append(
        Row(f"dispatch: events routed into tasks ({dispatched:,})", dispatch_rate, None, "tasks/s")
    )
    print_table(
        f"scheduler: {ops:,} tasks leased and completed from a queue of {count:,}",
        rows,
        "bare SKIP LOCKED loop",
    )


if __name__ == "__main__":
    main()
