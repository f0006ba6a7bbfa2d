"""One ``asyncio.Lock`` per stream of a tenant, so the events of one run that race each
other in this process are planned and appended one after the other (``router``).

A lock lives only while a task holds it or waits for it: the map holds the streams in
use, not every stream ever named.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass(slots=True)
class _Held:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # the task holding it and those waiting for it


class StreamLocks:
    def __init__(self) -> None:
        self._held: dict[tuple[str, str], _Held] = {}

    def __len__(self) -> int:
        """How many streams have a lock now (one held or waited for)."""
        return len(self._held)

    @asynccontextmanager
    async def holding(self, tenant: str, stream: str) -> AsyncIterator[None]:
        """Run the block alone among the blocks holding the same tenant's ``stream``."""
        key = (tenant, stream)
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = _Held()
        held.users += 1
        try:
            async with held.lock:
                yield
        finally:
            held.users -= 1
            if held.users == 0:
                del self._held[key]
