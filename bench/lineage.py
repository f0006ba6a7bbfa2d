"""``audit`` over HTTP against the raw recursive SQL for the same question, same data.

Builds (or reuses) a store with a realistic causal DAG: concurrent workflow runs of 150
events, interleaved in position order; each event names 1-3 causes among the last few
of its run, so lineages reach depth 20 and more and hold up to about 150 events. Then,
for random decisions (the last event of a run), it times the GraphQL ``audit`` query
over HTTP (the bench's bare keep-alive client, so the figure is the server's and not a
client library's) and, as the baseline, one recursive CTE that fetches the same
ancestors with psycopg, the two back to back for each decision. Run:
``python -m bench.lineage [--quick] [--events N] [--decisions N] [--passes N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

import orjson
import psycopg
from sqlalchemy import URL

from app.db.engine import create_engine, libpq_conninfo
from app.store.keys import KeyStore, Scope
from app.store.log import EventLog
from app.store.model_registry import Signature, registration_event
from app.store.records import NewEvent
from bench._harness import (
    Row,
    bench_server,
    ensure_database,
    percentile,
    print_table,
    serving,
    settle,
)
from bench._http import Connection

RUN_LENGTH = 150
PARALLEL_RUNS = 64
AUDIT = """query ($id: ID!) { audit(decisionId: $id, maxDepth: 100) {
  sourceEvents { id } derivedEvents { id } models { name version events { id } }
  chainVerified truncated } }"""
RAW = """
WITH RECURSIVE up(position) AS (
    SELECT position FROM events WHERE tenant = %(tenant)s AND id = %(id)s
  UNION
    SELECT c.cause FROM event_causes c JOIN up ON c.effect = up.position
)
SELECT e.id, e.type, e.model_name, e.model_version, e.causes, e.data
FROM events e JOIN up ON e.position = up.position
"""


def workload(total: int, seed: int = 7) -> tuple[list[list[NewEvent]], list[str]]:
    """Batches of events in append order, and the ids of the decisions."""
    rng = random.Random(seed)
    runs = max(1, total // RUN_LENGTH)
    ordered: list[NewEvent] = []
    decisions: list[str] = []
    for start in range(0, runs, PARALLEL_RUNS):
        group = range(start, min(runs, start + PARALLEL_RUNS))
        for step in range(RUN_LENGTH):
            for run in group:
                event_id = f"r{run}-e{step}"
                if step < 3:
                    causes: tuple[str, ...] = ()
                else:
                    window = range(max(0, step - 6), step)
                    picked = rng.sample(list(window), k=min(len(window), rng.randint(1, 3)))
                    causes = tuple(f"r{run}-e{k}" for k in sorted(picked))
                last = step == RUN_LENGTH - 1
                model = rng.choice([("detector", "3"), ("ranker", "1"), None]) if not last else None
                ordered.append(
                    NewEvent(
                        id=event_id,
                        source=f"/runs/{run % 16}",
                        type="decision" if last else ("sensor" if step < 3 else "derived"),
                        stream=f"run-{run}",
                        has_data=True,
                        data={"run": run, "step": step, "score": rng.random()},
                        causes=causes,
                        correlation_id=f"run-{run}",
                        model_name=model[0] if model else None,
                        model_version=model[1] if model else None,
                    )
                )
                if last:
                    decisions.append(event_id)
    batches = [ordered[i : i + 5000] for i in range(0, len(ordered), 5000)]
    return batches, decisions


async def build(url: object, batches: list[list[NewEvent]]) -> str:
    engine = create_engine(url, pool_size=1, statement_timeout_ms=0)  # type: ignore[arg-type]
    signature = Signature.model_validate(
        {"inputs": [{"type": "double"}], "outputs": [{"type": "double"}]}
    )
    async with engine.begin() as conn:
        await EventLog(conn).append(
            "bench",
            [
                registration_event(name, version, signature, {}, enforce_outputs=False)
                for name, version in (("detector", "3"), ("ranker", "1"))
            ],
        )
    started, done = time.perf_counter(), 0
    for batch in batches:
        async with engine.begin() as conn:
            await EventLog(conn).append("bench", batch)
        done += len(batch)
        if done % 100_000 < len(batch):
            rate = done / (time.perf_counter() - started)
            print(f"  built {done:,} events ({rate:,.0f}/s)", flush=True)
    async with engine.begin() as conn:
        key = (await KeyStore(conn).create("bench", frozenset({Scope.READ}))).key
    await engine.dispose()
    return key


async def make_key(url: object) -> str:
    engine = create_engine(url, pool_size=1)  # type: ignore[arg-type]
    async with engine.begin() as conn:
        key = (await KeyStore(conn).create("bench", frozenset({Scope.READ}))).key
    await engine.dispose()
    return key


async def contest(
    url: URL, base: str, key: str, chosen: list[str], passes: int
) -> tuple[list[float], list[float], list[int]]:
    """Both contenders on every decision, back to back, after a pass that warms the cache
    for both: this machine's speed drifts from one minute to the next, and contenders
    timed in turn see the same drift. Which one goes first alternates by decision."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    raw_ms: list[float] = []
    audit_ms: list[float] = []
    sizes: list[int] = []
    http = await Connection.open(base)
    try:
        with psycopg.connect(libpq_conninfo(url)) as conn:

            def raw(decision: str) -> int:
                t0 = time.perf_counter()
                rows = conn.execute(RAW, {"tenant": "bench", "id": decision}).fetchall()
                raw_ms.append((time.perf_counter() - t0) * 1000)
                return len(rows)

            async def audit(decision: str) -> None:
                body = orjson.dumps({"query": AUDIT, "variables": {"id": decision}})
                t0 = time.perf_counter()
                status, answer = await http.post("/graphql", body, headers)
                audit_ms.append((time.perf_counter() - t0) * 1000)
                found = orjson.loads(answer)
                assert status == 200, found
                assert "errors" not in found, found
                assert found["data"]["audit"]["chainVerified"], decision
                assert not found["data"]["audit"]["truncated"], decision

            for decision in chosen:
                raw(decision)
                await audit(decision)
            raw_ms.clear()
            audit_ms.clear()
            for _ in range(passes):
                for i, decision in enumerate(chosen):
                    if i % 2:
                        await audit(decision)
                        sizes.append(raw(decision))
                    else:
                        sizes.append(raw(decision))
                        await audit(decision)
    finally:
        await http.close()
    return raw_ms, audit_ms, sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small store, for CI")
    parser.add_argument("--events", type=int, default=None)
    parser.add_argument("--decisions", type=int, default=None)
    parser.add_argument("--passes", type=int, default=None, help="timed passes over them")
    parser.add_argument("--rebuild", action="store_true", help="drop and rebuild the store")
    args = parser.parse_args()
    total = args.events or (20_000 if args.quick else 1_000_000)
    samples = args.decisions or (30 if args.quick else 200)
    passes = args.passes or (1 if args.quick else 3)

    batches, decisions = workload(total)
    with bench_server() as server:
        url, existed = ensure_database(
            server, f"causeway_bench_lineage_{total}", fresh=args.rebuild
        )
        with psycopg.connect(libpq_conninfo(url)) as conn:
            stored = conn.execute("SELECT count(*) FROM events").fetchone()
        if existed and stored and stored[0] == sum(len(b) for b in batches) + 2:
            print(f"reusing a store of {stored[0]:,} events")
            key = asyncio.run(make_key(url))
        else:
            if existed:
                url, _ = ensure_database(server, url.database or "", fresh=True)
            print(f"building a store of {sum(len(b) for b in batches):,} events")
            key = asyncio.run(build(url, batches))
        with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")  # fresh statistics for both contenders
        chosen = random.Random(11).sample(decisions, k=min(samples, len(decisions)))
        with serving(url) as base:
            settle(base, key)
            raw_ms, audit_ms, sizes = asyncio.run(contest(url, base, key, chosen, passes))

    p50, p99 = percentile(audit_ms, 50), percentile(audit_ms, 99)
    raw50, raw99 = percentile(raw_ms, 50), percentile(raw_ms, 99)
    print_table(
        f"lineage: audit over HTTP vs one recursive CTE (psycopg), {total:,} events, "
        f"{len(chosen)} decisions x {passes} passes, interleaved, lineage of {min(sizes)}-{max(sizes)} events "
        f"(median {percentile([float(s) for s in sizes], 50):.0f})",
        [
            Row("audit latency p50", p50, raw50, "ms", higher_is_better=False),
            Row("audit latency p99", p99, raw99, "ms", higher_is_better=False),
        ],
        "raw recursive SQL",
    )
    print(
        f"\ntargets: p50 within 3x of the raw SQL ({p50 / raw50:.2f}x), p50 under 50 ms ({p50:.1f} ms)"
    )


if __name__ == "__main__":
    main()
