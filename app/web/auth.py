"""Who is asking: Bearer keys checked against the store, with a short in-process cache.

Without the cache every request would spend a database round trip (and a pooled
connection) on its key before doing any work. A hit is only trusted for ``ttl_s``
seconds, so a revoked key stops working within that time in every process (0 turns the
cache off). The cache holds SHA-256 digests of keys, never the keys.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict

from app.db.engine import Engine
from app.store.keys import KeyStore, Principal


class Authenticator:
    def __init__(self, engine: Engine, *, ttl_s: float, max_entries: int = 10_000) -> None:
        self._engine = engine
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._cache: OrderedDict[bytes, tuple[float, Principal]] = OrderedDict()

    async def authenticate(self, key: str) -> Principal | None:
        digest = hashlib.sha256(key.encode()).digest()
        now = time.monotonic()
        found = self._hit(digest, now)
        if found is not None:
            return found
        async with self._engine.connect() as conn:
            found = await KeyStore(conn).authenticate(key)
        if found is None:
            self._cache.pop(digest, None)
        elif self._ttl_s > 0:
            self._cache[digest] = (now + self._ttl_s, found)
            self._cache.move_to_end(digest)
            while len(self._cache) > self._max_entries:
                self._cache.popitem(last=False)
        return found

    def _hit(self, digest: bytes, now: float) -> Principal | None:
        hit = self._cache.get(digest)
        return hit[1] if hit is not None and hit[0] > now else None
