"""API keys: each belongs to one tenant and carries scopes. Only a SHA-256 is stored.

A key reads ``cw_<key id>_<secret>``. The key id is public (it names the key in
``causeway keys revoke``); the secret has 256 bits of entropy, so a plain SHA-256 is
enough to store it (no password hashing needed) and is compared in constant time.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from app import settings
from app.db.tables import api_keys
from app.errors import BadRequest, NotFound

_KEY = re.compile(r"^cw_(?P<key_id>[0-9a-f]{12})_(?P<secret>[A-Za-z0-9_-]{43})\Z")


def is_well_formed(key: str) -> bool:
    """Whether ``key`` has the form every key has (``cw_<id>_<secret>``): one that has not
    is refused without a look in the database."""
    return _KEY.match(key) is not None


TENANT_PATTERN = settings.TENANT_PATTERN  # the names a key's tenant can have
# The label of the tenants past the metrics' bound (``app.telemetry.metrics.OTHER``), which
# every tenant's scrape shows: a tenant of that name would show its series to all.
RESERVED_TENANT = "other"


class Scope(enum.StrEnum):
    INGEST = "ingest"
    WORKER = "worker"
    READ = "read"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class Principal:
    key_id: str
    tenant: str
    scopes: frozenset[Scope]


@dataclass(frozen=True, slots=True)
class IssuedKey:
    key: str  # shown once, never stored
    principal: Principal


def parse_scopes(text: str) -> frozenset[Scope]:
    names = [part.strip() for part in text.split(",")]
    # An empty part ("read,,ingest", a trailing comma) is a slip, not a scope to skip.
    if not all(n in Scope.__members__.values() for n in names):
        raise BadRequest(
            f"scopes must be a comma-separated subset of {', '.join(Scope)}; got {text!r}"
        )
    return frozenset(Scope(n) for n in names)


class KeyStore:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def create(
        self, tenant: str, scopes: frozenset[Scope], description: str | None = None
    ) -> IssuedKey:
        if not TENANT_PATTERN.match(tenant):
            raise BadRequest(
                f"tenant {tenant!r} must be 1-63 of a-z, 0-9, '_', '.', '-', "
                "starting with a letter or digit"
            )
        if tenant == RESERVED_TENANT:
            raise BadRequest(
                f"tenant {tenant!r} is reserved: the metrics name the tenants past their "
                "bound so (docs/observability.md)"
            )
        key_id = secrets.token_hex(6)
        key = f"cw_{key_id}_{secrets.token_urlsafe(32)}"
        await self._conn.execute(
            insert(api_keys).values(
                key_id=key_id,
                tenant=tenant,
                scopes=sorted(scopes),
                secret_sha256=hashlib.sha256(key.encode()).digest(),
                description=description,
                created_at=datetime.now(UTC),
            )
        )
        return IssuedKey(key=key, principal=Principal(key_id, tenant, scopes))

    async def revoke(self, key_id: str) -> None:
        result = await self._conn.execute(
            update(api_keys)
            .where(api_keys.c.key_id == key_id, api_keys.c.revoked_at.is_(None))
            .values(revoked_at=datetime.now(UTC))
        )
        if result.rowcount == 0:
            raise NotFound(f"no active key with id {key_id!r}")

    async def authenticate(self, key: str) -> Principal | None:
        """The key's principal, or None when the key is malformed, unknown or revoked."""
        match = _KEY.match(key)
        if match is None:
            return None
        row = (
            await self._conn.execute(
                select(api_keys).where(
                    api_keys.c.key_id == match["key_id"], api_keys.c.revoked_at.is_(None)
                )
            )
        ).one_or_none()
        if row is None:
            return None
        if not hmac.compare_digest(bytes(row.secret_sha256), hashlib.sha256(key.encode()).digest()):
            return None
        return Principal(row.key_id, row.tenant, frozenset(Scope(s) for s in row.scopes))
