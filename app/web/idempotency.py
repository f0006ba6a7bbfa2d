"""The ``Idempotency-Key`` request header (draft-ietf-httpapi-idempotency-key-header): a
key the sender makes up for one request, so that the request sent again (its answer lost)
is answered as the first was instead of being done twice.

Its value is a Structured Field String (RFC 8941: ``"..."``, printable ASCII, ``\\"`` and
``\\\\`` escaped); a bare key of visible ASCII, as many clients send it, is taken too."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Depends, Header

from app.errors import BadRequest

MAX_KEY_LENGTH = 255
_BARE = re.compile(r"[!#-~]+")  # visible ASCII but the quote: an unquoted key
_QUOTED = re.compile(r'"((?:[ !#-\[\]-~]|\\["\\])*)"')  # RFC 8941 sf-string


def parse_key(value: str) -> str:
    """The key ``value`` gives, or a ``BadRequest`` saying what a key is."""
    text = value.strip(" \t")
    quoted = _QUOTED.fullmatch(text)
    key = re.sub(r"\\(.)", r"\1", quoted[1]) if quoted else text if _BARE.fullmatch(text) else ""
    if not key or len(key) > MAX_KEY_LENGTH:
        raise BadRequest(
            f"Idempotency-Key {value!r} is not a key: send a quoted string of 1-"
            f"{MAX_KEY_LENGTH} printable ASCII characters, such as "
            '"8e03978e-40d5-43e8-bc93-6894a57f9324"',
            header="Idempotency-Key",
        )
    return key


async def _idempotency_key(
    idempotency_key: Annotated[
        str | None,
        Header(
            description="a key of yours for this request (a quoted string, 1-255 printable "
            "ASCII characters): the request sent again with it is answered as the first was, "
            "and does nothing again; sent with another command or body, it is refused (422)",
            examples=['"8e03978e-40d5-43e8-bc93-6894a57f9324"'],
        ),
    ] = None,
) -> str | None:
    return None if idempotency_key is None else parse_key(idempotency_key)


IdempotencyKey = Annotated[str | None, Depends(_idempotency_key)]
