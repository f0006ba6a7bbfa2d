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
from typing import Any

import psycopg
from sqlalchemy import URL, func, select

from app.db.engine import create_engine
from app.db.tables import tasks
from app.projections.runner import ProjectionRunner
from app.store.keys import KeyStore, Scope
from app.store.log import EventLog
from app.store.records import NewEvent
from bench._harness import Row, bench_server, ensure_database, libpq, print_table, serving
from ingest.client import CausewayClient
from scheduler.projections import scheduler_projections
from scheduler.routes import define_event, parse_route

TENANT = "bench"
QUEUE = "inference"


async def seed(url: URL, count: int) -> str:
    """``count`` ready tasks in ``QUEUE``, made by the dispatcher; a worker key."""
    engine = create_engine(url, pool_size=2)
    route = parse_route(
        {"id": "frames", "types": ["bench.frame"], "kind": "detect", "queue": QUEUE}
    )
    async with engine.begin() as conn:
        key = (await KeyStore(conn).create(TENANT, frozenset({Scope.WORKER}))).key
        await EventLog(conn).append(TENANT, [define_event(route)])
    for start in range(0, count, 1000):
        batch = [
            NewEvent(
                id=f"frame-{n}",
                source="/bench/cameras/1",
                type="bench.frame",
                stream="bench-frames",
                has_data=True,
                data={"frame": n},
            )
            for n in range(start, min(start + 1000, count))
        ]
        async with engine.begin() as conn:
            await EventLog(conn).append(TENANT, batch)
    runner = ProjectionRunner(engine, scheduler_projections(), batch_size=1000)
    for projection in runner.projections:
        if not projection.inline:
            await runner.catch_up(projection)
    async with engine.connect() as conn:
        made = (await conn.execute(select(func.count()).select_from(tasks))).scalar_one()
    await engine.dispose()
    if made != count:
        raise RuntimeError(f"the dispatcher made {made} tasks, not {count}")
    return key


def copy_table(url: URL) -> None:
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_tasks")
        conn.execute("CREATE TABLE bench_tasks (LIKE tasks INCLUDING ALL)")
        conn.execute("INSERT INTO bench_tasks SELECT * FROM tasks")
        conn.execute("VACUUM ANALYZE bench_tasks")


def run_workers(args: list[str], workers: int) -> tuple[float, int]:
    """Start ``workers`` copies of this script in worker mode; wall time and tasks done."""
    started = time.perf_counter()
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.scheduler", *args, "--name", f"w{n}"],
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


def causeway_worker(base: str, key: str, name: str) -> int:
    done = 0
    with CausewayClient(base, key) as client:
        while (lease := client.lease(QUEUE, name)) is not None:
            client.complete(lease)
            done += 1
    return done


def bare_worker(dsn: str, name: str) -> int:
    done = 0
    with psycopg.connect(dsn) as conn:
        while True:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, for CI")
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--workers", type=int, default=None)
    # Worker mode, used by the benchmark itself.
    parser.add_argument("--causeway", nargs=2, metavar=("BASE", "KEY"), help=argparse.SUPPRESS)
    parser.add_argument("--bare", metavar="DSN", help=argparse.SUPPRESS)
    parser.add_argument("--name", default="w", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.causeway:
        base, key = args.causeway
        print(causeway_worker(base, key, args.name))
        return
    if args.bare:
        print(bare_worker(args.bare, args.name))
        return

    count = args.tasks or (500 if args.quick else 100_000)
    workers = args.workers or (4 if args.quick else 8)
    with bench_server() as server:
        url, _ = ensure_database(server, "causeway_bench_scheduler", fresh=True)
        seeded = time.perf_counter()
        key = asyncio.run(seed(url, count))
        seed_s = time.perf_counter() - seeded
        copy_table(url)
        bare_s, bare_done = run_workers(["--bare", libpq(url)], workers)
        with serving(url) as base:
            ours_s, ours_done = run_workers(["--causeway", base, key], workers)
    if (bare_done, ours_done) != (count, count):
        raise RuntimeError(f"done: bare {bare_done}, Causeway {ours_done}, of {count}")
    rows: list[Any] = [
        Row(f"lease + complete, {workers} worker processes", ours_done / ours_s, bare_done / bare_s, "tasks/s"),
        Row("dispatch (events routed into tasks)", count / seed_s, None, "tasks/s"),
    ]  # fmt: skip
    print_table(
        f"scheduler: {count:,} tasks, {workers} worker processes",
        rows,
        "bare SKIP LOCKED loop",
    )


if __name__ == "__main__":
    main()
