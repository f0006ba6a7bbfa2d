"""Subjects, message ids and the tenants the relay sends.

An event goes to ``causeway.<tenant>.<type tokens>``: the tenant is one token and the
type's dots split it into tokens, so ``causeway.acme.com.example.>`` takes acme's events
of every type under ``com.example``. NATS refuses (or cannot subscribe to) a token with
whitespace, ``.``, ``*`` or ``>`` in it, or an empty one, so each token is
percent-encoded: every byte of its UTF-8 outside ``!``..``~`` (space, control
characters, anything not ASCII) and the characters ``.`` ``*`` ``>`` ``%`` become ``%XX``
(upper-case hex); an empty token (a type with two dots in a row, or a dot at either
end) becomes ``%00`` (no text in PostgreSQL holds a NUL, so it is no one's encoding).
What NATS allows otherwise stays as it is, and ``decode_token`` reverses the rule.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from urllib.parse import unquote

PREFIX = "causeway"
EMPTY_TOKEN = "%00"  # noqa: S105 - a subject token, not a password
_KEEP = frozenset(range(0x21, 0x7F)) - {ord(c) for c in ".*>%"}


def encode_token(text: str) -> str:
    if not text:
        return EMPTY_TOKEN
    return "".join(chr(b) if b in _KEEP else f"%{b:02X}" for b in text.encode())


def decode_token(token: str) -> str:
    return "" if token == EMPTY_TOKEN else unquote(token, errors="strict")


@functools.lru_cache(maxsize=4096)  # a log has few (tenant, type) pairs; each is sent often
def subject_for(tenant: str, event_type: str) -> str:
    tokens = [encode_token(part) for part in event_type.split(".")]
    return ".".join([PREFIX, encode_token(tenant), *tokens])


def msg_id(tenant: str, position: int) -> str:
    """``Nats-Msg-Id``: the stream drops a second message with the same id. Tenants are
    ``[a-z0-9_.-]`` (``app.store.keys``), so the id needs no encoding."""
    return f"{tenant}:{position}"


def position_of(message_id: str | None) -> int | None:
    """The position in a relay's message id, or None for any other id."""
    _, _, tail = (message_id or "").rpartition(":")
    return int(tail) if tail.isdigit() else None


@dataclass(frozen=True, slots=True)
class Tenants:
    """``CAUSEWAY_NATS_TENANTS``: unset, every tenant; ``a,b`` only those; ``-a,-b``
    every tenant but those."""

    names: frozenset[str] = frozenset()
    excluding: bool = True

    @classmethod
    def parse(cls, text: str | None) -> Tenants:
        names = [n.strip() for n in (text or "").split(",") if n.strip()]
        if not names:
            return cls()
        excluding = names[0].startswith("-")
        return cls(frozenset(n.removeprefix("-") for n in names), excluding)

    def includes(self, tenant: str) -> bool:
        return (tenant in self.names) != self.excluding

    def describe(self) -> str:
        if not self.names:
            return "every tenant"
        listed = ", ".join(sorted(self.names))
        return f"every tenant but {listed}" if self.excluding else f"only {listed}"
