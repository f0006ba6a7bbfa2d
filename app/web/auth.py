"""Who is asking: Bearer keys checked against the store, with a short in-process cache.

Without the cache every request would spend a database round trip (and a pooled
connection) on its key before doing any work. A hit is only trusted for ``ttl_s``
seconds, so a revoked key stops working within that time in every process (0 turns the
cache off). The cache holds SHA-256 digests of keys, never the keys.

For ``GET /metrics`` alone, while the database does not answer (or not within
``STALE_ANSWER_S``), a key it confirmed within the last ``STALE_S`` seconds (after its entry
ran out) stands: the process's own figures are wanted most in an outage, and the route
reads nothing but figures (no event, no task, no key).

A key is looked up once however many of its requests arrive while it is not cached: the
others wait for that lookup. (Each looked it up itself: whenever a busy key's entry ran
out, every request in flight took a pooled connection for the same row at once, and a
burst of 32 clients opened connections past the pool's size, each a new server process.)
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict

from app.db.engine import Engine
from app.store.failures import is_unavailable
from app.store.keys import KeyStore, Principal, is_well_formed

# How long after its cache entry ran out a key the database confirmed stands while the
# database does not answer (``Authenticator.authenticate``), and how long its check waits for
# the database then (a key never confirmed waits as any request does).
STALE_S = 900.0
STALE_ANSWER_S = 2.0


class Authenticator:
    def __init__(self, engine: Engine, *, ttl_s: float, max_entries: int = 10_000) -> None:
        self._engine = engine
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._cache: OrderedDict[bytes, tuple[float, Principal]] = OrderedDict()
        # The lookups under way, by digest: what a request for the same key waits on.
        self._looking: dict[bytes, asyncio.Future[Principal | None]] = {}

    async def authenticate(self, key: str, *, in_outage: bool = False) -> Principal | None:
        """The key's principal (None: unknown or revoked). ``in_outage``: for a request
        that only reads the process's own figures (``GET /metrics``): while the database
        does not answer (or not within ``STALE_ANSWER_S``), a key it confirmed within the
        last ``STALE_S`` seconds stands. No other request is let through so: it would act
        on a key that may have been revoked meanwhile."""
        if not is_well_formed(key):  # no pooled connection for what no key can be
            return None
        digest = hashlib.sha256(key.encode()).digest()
        now = time.monotonic()
        found = self._hit(digest, now)
        if found is not None:
            return found
        lookup = self._looking.get(digest)
        if lookup is None or lookup.get_loop() is not asyncio.get_running_loop():
            lookup = asyncio.ensure_future(self._look_up(key, digest))
            self._looking[digest] = lookup
            lookup.add_done_callback(lambda done: self._forget(digest, done))
        kept = self._cache.get(digest)
        stands = kept[1] if in_outage and kept is not None and kept[0] + STALE_S > now else None
        if stands is None:
            # Shielded: a request that goes away (its client left) does not end the lookup
            # the others wait on.
            return await asyncio.shield(lookup)
        try:
            return await asyncio.wait_for(asyncio.shield(lookup), STALE_ANSWER_S)
        except Exception as exc:
            if isinstance(exc, TimeoutError) or is_unavailable(exc):
                return stands
            raise

    async def _look_up(self, key: str, digest: bytes) -> Principal | None:
        now = time.monotonic()
        found = await self._ask(key)
        if found is None:
            self._cache.pop(digest, None)
        elif self._ttl_s > 0:
            self._cache[digest] = (now + self._ttl_s, found)
            self._cache.move_to_end(digest)
            while len(self._cache) > self._max_entries:
                self._cache.popitem(last=False)
        return found

    async def _ask(self, key: str) -> Principal | None:
        async with self._engine.connect() as conn:
            return await KeyStore(conn).authenticate(key)

    def _forget(self, digest: bytes, done: asyncio.Future[Principal | None]) -> None:
        if self._looking.get(digest) is done:
            del self._looking[digest]
        if not done.cancelled():
            done.exception()  # retrieved: every waiter has it raised already

    def _hit(self, digest: bytes, now: float) -> Principal | None:
        hit = self._cache.get(digest)
        return hit[1] if hit is not None and hit[0] > now else None
