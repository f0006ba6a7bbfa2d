"""Reading a relay's stream back, as a consumer would: a durable pull consumer."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import nats
from nats.js.api import ConsumerConfig
from sqlalchemy.ext.asyncio import AsyncEngine

from app.projections.checkpoints import read_head
from app.projections.relay.log import RelayStatus, checkpoint_name, fetch_relay_status
from app.projections.relay.subjects import Tenants


@dataclass(frozen=True, slots=True)
class Received:
    subject: str
    headers: dict[str, str]
    data: bytes
    seq: int


async def consume(
    url: str, stream: str, durable: str, expected: int, timeout_s: float = 30
) -> list[Received]:
    """What a durable consumer of ``causeway.>`` receives (and acks), ``expected`` messages
    or what came before ``timeout_s`` ran out; then one more short wait for extras."""
    nc = await nats.connect(servers=url.split(","))
    try:
        js = nc.jetstream()
        await js.add_consumer(stream, ConsumerConfig(durable_name=durable, ack_wait=30))
        sub = await js.pull_subscribe("causeway.>", durable=durable, stream=stream)
        got: list[Received] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            want = expected - len(got)
            try:
                batch = await sub.fetch(batch=max(min(want, 1000), 1), timeout=1 if want else 0.5)
            # nats-py's own TimeoutError, or asyncio's when the wait ran out between its
            # two pull requests (nats/js/client.py, fetch): either is "nothing came".
            except TimeoutError:
                if want <= 0:
                    break
                continue
            for msg in batch:
                got.append(
                    Received(
                        msg.subject, dict(msg.headers or {}), msg.data, msg.metadata.sequence.stream
                    )
                )
                await msg.ack()
        return got
    finally:
        await nc.close()


async def wait_relayed(engine: AsyncEngine, stream: str, timeout_s: float = 60) -> RelayStatus:
    """Until the relay's checkpoint reaches the head of the log."""
    deadline = time.monotonic() + timeout_s
    while True:
        async with engine.connect() as conn:
            status = await fetch_relay_status(conn, stream, Tenants())
            if status.checkpoint >= await read_head(conn):
                return status
        if time.monotonic() > deadline:
            raise AssertionError(f"the relay did not catch up: {status}")
        await asyncio.sleep(0.1)


__all__ = ["Received", "checkpoint_name", "consume", "wait_relayed"]
