"""Scheduler throughput: lease + complete by worker processes over HTTP (the worker
library, ``ingest.worker``), against a bare ``FOR UPDATE SKIP LOCKED`` loop on an
identical table and against pgqueuer on the same PostgreSQL, in the same run; and the
dispatcher's rate with one route and with ten.

The tasks are made the real way: trigger events are appended and the dispatcher routes
them. The bare loop then gets a copy of the task table (same rows, same indexes) and
leases (``SELECT ... FOR UPDATE SKIP LOCKED`` + ``UPDATE``) and completes (``UPDATE``) one
task per transaction, fsync on, at 1, 2, 4 and 8 processes and with 8 threads: its best
is the baseline. What it leaves out is what Causeway adds: HTTP, keys, and every decision
appended to the hash-chained log (which is verified at the end). pgqueuer enqueues the
same number of jobs with its own ``enqueue`` and dequeues and acknowledges them with as
many worker processes as Causeway has, at the same batch size. Both run at batches of 10
and of 50 tasks a lease (``--batch``): much of what a lease or a completion costs
Causeway's server (HTTP, the transaction, the append group) does not grow with its size,
so the batch size moves its rate more than pgqueuer's.

Every worker notes when it did each task, on the machine's one monotonic clock, and the
rates compared are those while the middle 80% of a run's tasks were done (``Run.steady``):
the rate between a run's start and its end. The whole run, from the go to the last
worker's answer, is printed too: it counts each side's start (pgqueuer's workers connect
and check its schema first) and its end (pgqueuer's drain mode returns 2-4 s after a
worker's last job), which in a run of a few seconds were most of pgqueuer's time (5,000
jobs done in 0.86 s of a 4.06 s run) and made it look three times slower than it is.
pgqueuer gets sixteen times as many jobs as each Causeway run has tasks, so that its
window lasts seconds. Nothing here runs long enough to measure upkeep (vacuum, pgqueuer's log
aggregation, which the bench turns off).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
from pgqueuer.domain.types import QueueExecutionMode
from pgqueuer.models import Job
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries
from sqlalchemy import URL, func, select

from app.db.engine import create_engine, libpq_conninfo
from app.db.tables import tasks
from app.projections.runner import ProjectionRunner
from app.store.keys import KeyStore, Scope
from app.store.log import EventLog
from app.store.records import NewEvent
from app.store.verify import verify_chain
from app.wiring import every_projection
from bench._harness import (
    Row,
    bench_server,
    checkpoint,
    ensure_database,
    print_table,
    serving,
)
from ingest.worker import Worker
from scheduler import tasks as t
from scheduler.projections import DISPATCH_BATCH, Dispatcher, scheduler_projections
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
    runner = ProjectionRunner(engine, every_projection(), batch_size=dispatched or 1)
    dispatcher = runner.projection(Dispatcher.name)
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
    # Every projection the service runs has caught up before the clock starts: the
    # dispatcher has nothing left to route (every frame has its task), the task book has
    # read the decisions written above, and the drift watch, which reads every event, has
    # read the frames and decisions. A server started on a store whose projections lag
    # reads that backlog first, and the workers would be timed against its catch-up.
    for projection in runner.projections:
        await runner.catch_up(projection)
    async with engine.connect() as conn:
        found = (await conn.execute(select(func.count()).select_from(tasks))).scalar_one()
    await engine.dispose()
    if found != count:
        raise RuntimeError(f"{found} tasks were made, not {count}")
    analyze(url, "tasks", "events")
    return key, rate


def analyze(url: URL, *tables: str) -> None:
    """Give the planner the statistics autovacuum would have given a store that has run
    a while, so that what is timed runs the plans a running service gets: a table filled
    seconds ago has none, and the lease scan's plan changes once it has them
    (tests/integration/scheduler/test_lease_scan.py)."""
    with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
        for table in tables:
            conn.execute(f"VACUUM ANALYZE {table}")


def frame(n: int, *, lane: int = 0) -> NewEvent:
    return NewEvent(
        id=f"frame-{n}",
        source="/bench/cameras/1",
        type="bench.frame",
        stream="bench-frames",
        has_data=True,
        data={"frame": n, "lane": lane},
    )


def dispatch_rate(url: URL, routes: int, events: int) -> float:
    """Tasks/s the dispatcher makes of ``events`` trigger events under ``routes`` routes
    (each event matches one of them, by its ``lane``), in a tenant of their own."""
    return asyncio.run(_dispatch(url, f"dispatch-{routes}", routes, events))


async def _dispatch(url: URL, tenant: str, routes: int, events: int) -> float:
    engine = create_engine(url, pool_size=2)
    async with engine.begin() as conn:
        log = EventLog(conn)
        for n in range(routes):
            spec = {"id": f"lane-{n}", "types": ["bench.frame"], "kind": "detect",
                    "queue": QUEUE, "where": [f"lane={n}"]}  # fmt: skip
            [last] = await log.append(tenant, [define_event(parse_route(spec))])
    frames = [frame(n, lane=n % routes) for n in range(events)]
    async with engine.begin() as conn:
        await EventLog(conn).append(tenant, frames)
    # Batches of the size the service uses (app.wiring).
    runner = ProjectionRunner(
        engine, scheduler_projections(), batch_sizes={Dispatcher.name: DISPATCH_BATCH}
    )
    dispatcher = runner.projection(Dispatcher.name)
    while await runner.step(dispatcher, until=last.position):
        pass  # the routes: a batch ends after each
    started = time.perf_counter()
    while await runner.step(dispatcher, until=last.position + events):
        pass
    rate = events / (time.perf_counter() - started)
    async with engine.connect() as conn:
        made = (
            await conn.execute(select(func.count()).where(tasks.c.tenant == tenant))
        ).scalar_one()
    await engine.dispose()
    if made != events:
        raise RuntimeError(f"{made} tasks were made of {events} events")
    return rate


def copy_table(url: URL) -> None:
    with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_tasks")
        conn.execute("CREATE TABLE bench_tasks (LIKE tasks INCLUDING ALL)")
        conn.execute("INSERT INTO bench_tasks SELECT * FROM tasks")
        conn.execute("VACUUM ANALYZE bench_tasks")  # as the service's tables (analyze)
        conn.execute("VACUUM ANALYZE bench_tasks")
    checkpoint(url)


MIN_WINDOW_S = 0.5


@dataclass(frozen=True, slots=True)
class Run:
    """One run of worker processes: its wall time, the tasks done, and when each was done
    (``time.monotonic()``, one clock for every process of the machine)."""

    seconds: float
    done: int
    times: list[float]

    @property
    def whole(self) -> float:
        """Tasks/s over the whole run, from the go to the last worker's answer."""
        return self.done / self.seconds

    @property
    def steady(self) -> float:
        """Tasks/s while the middle 80% of the tasks were done, without what a run of a
        few seconds adds at either end (the workers' first connections and checks; the
        last batches, and the time a worker library takes to decide the queue is empty
        and return: pgqueuer's drain mode, 2-4 s after a worker's last job here). The
        slope of the tasks done against time (least squares): a worker's handler runs a
        lease's tasks microseconds apart, so the times come in steps, one a lease, and
        counting between two of them would count up to a batch too many. A window shorter
        than ``MIN_WINDOW_S`` (a smoke run, a few leases) says nothing steady: the whole
        run's rate instead (which, in a smoke run, counts pgqueuer's seconds of start-up
        and drain against its tenth of a second of work: ``--quick`` figures are no
        comparison)."""
        times = sorted(self.times)
        window = times[len(times) // 10 : len(times) - len(times) // 10]
        if len(window) < 20 or window[-1] - window[0] < MIN_WINDOW_S:
            return self.whole
        return statistics.linear_regression(window, range(len(window))).slope


def run_workers(args: list[str], workers: int, ops: int) -> Run:
    """Start ``workers`` copies of this script in worker mode, each to lease and complete
    ``ops / workers`` tasks; the run. The clock starts once every process has started
    (imports take seconds on a busy machine) and says it is ready, and stops once every
    one has said how many it did: not when the last has exited, as a process that
    imported this script (SQLAlchemy, psycopg, pgqueuer, the app) takes a third of a
    second of CPU to tear down, which is not the queue's work. Each then says when it
    did each of its tasks."""
    each = str(ops // workers)
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.scheduler", *args, "--name", f"w{n}", "--ops", each],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(workers)
    ]
    for process in processes:
        assert process.stdout is not None
        assert process.stdin is not None
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError("a worker did not start")
    started = time.perf_counter()
    for process in processes:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    counts = []
    for process in processes:  # in turn: once the last has answered, every one has
        assert process.stdout is not None
        counts.append(process.stdout.readline().strip())
    seconds = time.perf_counter() - started
    times: list[float] = []
    for process in processes:
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.close()
        # Read through the same buffer as the lines above (communicate() would read the
        # pipe beneath it and lose what that buffer holds already).
        times += [float(at) for at in process.stdout.read().split()]
        if process.wait(timeout=3600) != 0:
            raise RuntimeError("a worker failed")
    return Run(seconds, sum(int(count or 0) for count in counts), times)


def causeway_worker(base: str, key: str, name: str, batch: int, times: list[float]) -> Worker:
    """A worker of the bench's queue whose tasks produce nothing but the time each was
    run (in ``times``): made before the clock starts (its HTTP clients load the system's
    CA certificates, a quarter of a second of CPU each), run after."""

    def handle(_: object) -> list[dict[str, object]]:
        times.append(time.monotonic())
        return []

    return Worker(base, key, queue=QUEUE, name=name, handler=handle, batch=batch)


def bare_worker(dsn: str, name: str, ops: int, times: list[float]) -> int:
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
            times.append(time.monotonic())
            done += 1
    return done


def bare_threads(dsn: str, threads: int, ops: int) -> Run:
    """The bare loop on ``threads`` threads of this process."""
    times: list[float] = []
    with ThreadPoolExecutor(threads) as pool:
        started = time.perf_counter()
        done = sum(
            pool.map(lambda n: bare_worker(dsn, f"t{n}", ops // threads, times), range(threads))
        )
        return Run(time.perf_counter() - started, done, times)


def enqueue_pgqueuer(url: URL, jobs: int) -> None:
    """pgqueuer's schema, and ``jobs`` jobs enqueued with its own ``enqueue``."""

    async def enqueue() -> None:
        async with await psycopg.AsyncConnection.connect(
            libpq_conninfo(url), autocommit=True
        ) as conn:
            queries = Queries.from_psycopg_connection(conn)
            if not await queries.schema_is_installed():
                await queries.install()
            await queries.clear_queue()
            for start in range(0, jobs, 1000):
                size = min(1000, jobs - start)
                await queries.enqueue(["bench"] * size, [b"{}"] * size, [0] * size)

    asyncio.run(enqueue())
    checkpoint(url)


def pgqueuer_worker(dsn: str, batch: int, times: list[float]) -> int:
    """Dequeue and acknowledge pgqueuer's jobs until the queue is drained."""
    done = 0

    async def work() -> None:
        nonlocal done
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            manager = QueueManager(Queries.from_psycopg_connection(conn))

            @manager.entrypoint("bench")
            async def job(_: Job) -> None:
                nonlocal done
                times.append(time.monotonic())
                done += 1

            # A dequeue that finds fewer jobs than the batch (the other workers took them)
            # waits this long for a notice before the next: the bench enqueues before the
            # go, so no notice comes, and at 1 s each worker stood still a second at a time
            # (gaps of 1.001 s in a run of 1.14 s), which understated pgqueuer.
            await manager.run(
                batch_size=batch,
                mode=QueueExecutionMode.drain,
                dequeue_timeout=timedelta(milliseconds=20),
                log_aggregation_interval=timedelta(0),
            )

    asyncio.run(work())
    return done


def verify(url: URL) -> None:
    """The log still verifies after every decision the run appended."""

    async def walk() -> bool:
        engine = create_engine(url, pool_size=1)
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="REPEATABLE READ")
            async with conn.begin():
                intact = (await verify_chain(conn)).is_intact
        await engine.dispose()
        return intact

    if not asyncio.run(walk()):
        raise RuntimeError("the chain does not verify after the run")


def _worker_mode(args: argparse.Namespace) -> bool:
    worker = None
    batch = args.batch[0] if args.batch else 10
    times: list[float] = []
    if args.causeway:
        base, key = args.causeway
        worker = causeway_worker(base, key, args.name, batch, times)
    if args.causeway or args.bare or args.pgqueuer:
        print("ready", flush=True)
        sys.stdin.readline()  # the go: every worker has started
    if worker is not None:
        with worker:
            print(worker.run(max_tasks=args.ops, until_idle=True).completed, flush=True)
    elif args.bare:
        print(bare_worker(args.bare, args.name, args.ops, times), flush=True)
    elif args.pgqueuer:
        print(pgqueuer_worker(args.pgqueuer, batch, times), flush=True)
    else:
        return False
    print(" ".join(f"{at:.6f}" for at in times), flush=True)  # when each task was done
    return True


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, for CI")
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument(
        "--batch",
        type=int,
        action="append",
        default=None,
        help="tasks per lease (and pgqueuer's batch); repeat for more (default: 10 and 50)",
    )
    parser.add_argument(
        "--ops", type=int, default=None, help="tasks each side leases and completes"
    )
    # Worker mode, used by the benchmark itself.
    parser.add_argument("--causeway", nargs=2, metavar=("BASE", "KEY"), help=argparse.SUPPRESS)
    parser.add_argument("--bare", metavar="DSN", help=argparse.SUPPRESS)
    parser.add_argument("--pgqueuer", metavar="DSN", help=argparse.SUPPRESS)
    parser.add_argument("--name", default="w", help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    if _worker_mode(args):
        return
    count = args.tasks or (500 if args.quick else 100_000)
    workers = args.workers or (2 if args.quick else 8)
    ops = args.ops or (100 if args.quick else 10_000)
    batches = args.batch or ([10] if args.quick else [10, 50])
    if count < ops * 2 * len(batches):
        raise SystemExit(f"--tasks {count:,} is too few for {2 * len(batches)} runs of {ops:,}")
    dispatched = min(count, 100 if args.quick else 2_000)
    with bench_server() as server:
        url, _ = ensure_database(server, "causeway_bench_scheduler", fresh=True)
        key, _ = asyncio.run(seed(url, count, dispatched))
        dsn = libpq_conninfo(url)
        bare: dict[str, Run] = {}
        for processes in (2,) if args.quick else (1, 2, 4, 8):
            copy_table(url)
            bare[f"{processes} processes"] = run_workers(["--bare", dsn], processes, ops)
        copy_table(url)
        bare["8 threads"] = bare_threads(dsn, 8, ops)
        pgqueuer: dict[int, Run] = {}
        ours: dict[tuple[int, int], Run] = {}  # (batch, server processes)
        # pgqueuer's jobs: sixteen times ours in a full run, so that its steady window (it
        # runs 6,000-12,000 a second here, since its wait for a notice is short) lasts
        # seconds: at four times, batches of 50 were over in half a second, and the rate
        # fell back to the whole run's, start-up and drain included.
        jobs = ops if args.quick else 16 * ops
        for batch in batches:
            enqueue_pgqueuer(url, jobs)
            pgqueuer[batch] = run_workers(
                ["--pgqueuer", dsn, "--batch", str(batch)], workers, workers
            )
            for processes in (1, 2):
                checkpoint(url)
                with serving(url, workers=processes) as base:
                    command = ["--causeway", base, key, "--batch", str(batch)]
                    ours[batch, processes] = run_workers(command, workers, ops)
        verify(url)
        one_route = dispatch_rate(url, 1, dispatched)
        ten_routes = dispatch_rate(url, 10, dispatched)
    best = max(bare, key=lambda k: bare[k].steady)
    rows = [
        Row(
            f"lease + complete, {workers} workers, batches of {batch}, {n} server process(es)",
            run.steady,
            bare[best].steady,
            "tasks/s",
        )
        for (batch, n), run in ours.items()
    ]
    rows += [Row(f"(the bare loop itself, at {k})", v.steady, None, "tasks/s")
             for k, v in bare.items()]  # fmt: skip
    title = (
        f"scheduler: {ops:,} tasks leased and completed from a queue of {count:,}, each run; "
        "rates while the middle 80% of a run's tasks were done"
    )
    print_table(title, rows, f"bare SKIP LOCKED loop, best ({best}), one task a transaction")
    rows = [
        Row(f"lease + complete, batches of {batch}, {n} server process(es)", run.steady,
            pgqueuer[batch].steady, "tasks/s")
        for (batch, n), run in ours.items()
    ]  # fmt: skip
    rows += [Row(f"(pgqueuer itself, batches of {b})", v.steady, None, "tasks/s")
             for b, v in pgqueuer.items()]  # fmt: skip
    print_table(f"against pgqueuer ({workers} workers, the same batch size)", rows, "pgqueuer")
    rows = [
        Row(f"lease + complete, batches of {batch}, {n} server process(es)", run.whole,
            pgqueuer[batch].whole, "tasks/s")
        for (batch, n), run in ours.items()
    ]  # fmt: skip
    rows += [Row(f"(the bare loop, best, {best})", bare[best].whole, None, "tasks/s")]
    title = (
        "the same runs timed whole, from the go to the last worker's answer: start-up and "
        "the end of the queue counted (pgqueuer's drain mode returns 2-4 s after its last job)"
    )
    print_table(title, rows, "pgqueuer")
    rows = [
        Row(f"dispatch: events routed into tasks ({dispatched:,}), 1 route", one_route,
            None, "tasks/s"),
        Row(f"dispatch: events routed into tasks ({dispatched:,}), 10 routes", ten_routes,
            None, "tasks/s"),
    ]  # fmt: skip
    print_table("dispatch", rows, "-")
    print("\nthe chain verifies after the run")


if __name__ == "__main__":
    main()
