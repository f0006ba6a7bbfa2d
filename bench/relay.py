"""Relay throughput: ``causeway``'s relay publishing a store's events to JetStream
(from its checkpoint to the head: read, encode, publish pipelined, checkpoint) against a
bare nats-py JetStream publisher sending the same messages (subjects, headers, payloads,
read from the log beforehand) with pipelined acknowledgements, to the same nats-server,
in the same run. Target: the relay at 0.5x the bare publisher or better.

Run: ``python -m bench.relay [--quick] [--events N]`` (needs ``nats-server`` on PATH).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace

import nats
import psycopg
from nats.js.api import StreamConfig
from sqlalchemy import URL

from app.db.engine import create_engine, libpq_conninfo
from app.projections.checkpoints import read_head
from app.projections.relay.log import checkpoint_name, read_batch, read_checkpoint
from app.projections.relay.messages import headers_and_payload
from app.projections.relay.relay import NatsRelay, RelayConfig
from app.projections.relay.subjects import Tenants, msg_id, subject_for
from bench._harness import Row, bench_server, free_port, print_table, stored_events
from bench.replay import build

Message = tuple[str, dict[str, str], bytes]


@contextlib.contextmanager
def nats_server() -> Iterator[str]:
    binary = shutil.which("nats-server")
    if binary is None:
        raise SystemExit("nats-server is not on PATH")
    folder = tempfile.mkdtemp(prefix="causeway-bench-nats-")
    port = free_port()
    process = subprocess.Popen(
        [binary, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", folder],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)
        yield f"nats://127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait()
        shutil.rmtree(folder, ignore_errors=True)


async def load_messages(url: URL) -> list[Message]:
    """Every event as the relay would send it (structured mode), read up front."""
    engine = create_engine(url, pool_size=1, statement_timeout_ms=0)
    found: list[Message] = []
    async with engine.connect() as conn:
        head = await read_head(conn)
        after = 0
        while batch := (await read_batch(conn, after, head, 5000, 64 << 20, Tenants())).events:
            for event in batch:
                headers, payload = headers_and_payload(event.document, "structured")
                headers["Nats-Msg-Id"] = msg_id(event.tenant, event.position)
                found.append((subject_for(event.tenant, event.type), headers, payload))
            after = batch[-1].position
    await engine.dispose()
    return found


async def bare(server: str, messages: list[Message]) -> float:
    """Seconds for nats-py alone to publish ``messages`` and have every ack back."""
    nc = await nats.connect(server)
    js = nc.jetstream(publish_async_max_pending=4000)
    await js.add_stream(StreamConfig(name="BARE", subjects=["bare.>"], duplicate_window=120))
    started = time.perf_counter()
    acks = [
        await js.publish_async("bare" + subject.removeprefix("causeway"), payload, headers=dict(h))
        for subject, h, payload in messages
    ]
    await asyncio.gather(*acks)
    elapsed = time.perf_counter() - started
    stored = (await js.stream_info("BARE")).state.messages
    await nc.close()
    assert stored == len(messages), (stored, len(messages))
    return elapsed


async def relayed(server: str, url: URL, total: int, config: RelayConfig) -> float:
    """Seconds for the relay to take its checkpoint from 0 to the head."""
    with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
        conn.execute(
            "DELETE FROM projection_checkpoints WHERE name = %s", (checkpoint_name("CAUSEWAY"),)
        )
    nc = await nats.connect(server)  # the stream made beforehand, as for the bare publisher
    await nc.jetstream().add_stream(
        StreamConfig(name="CAUSEWAY", subjects=["causeway.>"], duplicate_window=120)
    )
    await nc.close()
    engine = create_engine(url, pool_size=3, statement_timeout_ms=0)
    relay = NatsRelay(engine, replace(config, servers=[server]))
    watcher = create_engine(url, pool_size=1)
    started = time.perf_counter()
    task = asyncio.create_task(relay.run())
    try:
        while True:
            async with watcher.connect() as conn:
                if await read_checkpoint(conn, checkpoint_name("CAUSEWAY")) >= total:
                    break
            await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - started
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await relay.dispose()
        await watcher.dispose()
    nc = await nats.connect(server)
    stored = (await nc.jetstream().stream_info("CAUSEWAY")).state.messages
    await nc.close()
    assert stored == total, (stored, total)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small store, for CI")
    parser.add_argument("--events", type=int, default=None)
    defaults = RelayConfig(servers=[], poll_interval_s=0.05)
    parser.add_argument(
        "--batch-events", type=int, default=defaults.batch_events, help="CAUSEWAY_NATS_BATCH_EVENTS"
    )
    parser.add_argument(
        "--batch-bytes", type=int, default=defaults.batch_bytes, help="CAUSEWAY_NATS_BATCH_BYTES"
    )
    args = parser.parse_args()
    config = replace(defaults, batch_events=args.batch_events, batch_bytes=args.batch_bytes)
    total = args.events or (5_000 if args.quick else 200_000)

    with bench_server() as server:
        url, _ = stored_events(
            server, f"causeway_bench_relay_{total}", total, functools.partial(build, total=total)
        )
        messages = asyncio.run(load_messages(url))
        with nats_server() as nats_url:
            base_s = asyncio.run(bare(nats_url, messages))
        with nats_server() as nats_url:
            ours_s = asyncio.run(relayed(nats_url, url, len(messages), config))
    count = len(messages)
    print_table(
        f"relay: {count:,} events into JetStream (one nats-server, R1, acks awaited; "
        f"batches of {config.batch_events:,} events or {config.batch_bytes:,} bytes)",
        [Row("publish rate (events/s)", count / ours_s, count / base_s, "events/s")],
        "bare nats-py publish_async",
    )
    print(f"\nrelay / bare publisher: {base_s / ours_s:.2f}x (target >= 0.5x)")


if __name__ == "__main__":
    main()
