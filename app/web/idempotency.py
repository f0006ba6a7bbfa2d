"""The ``Idempotency-Key`` request header (draft-ietf-httpapi-idempotency-key-header): a
key the sender makes up for one request, so that the request sent again (its answer lost)
is answered as the first was instead of being done twice.

Its value is a Structured Field String (RFC 8941: ``"..."``, printable ASCII, ``\\"`` and
``\\\\`` escaped); a bare key of visible ASCII, as many clients send it, is taken too."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Depends, Header

MAX_KEY_LENGTH = 255
_CHAR = r'(?:[ !#-\[\]-~]|\\["\\])'  # RFC 8941 sf-string: printable ASCII, \" and \\ escaped
_BARE = r"[!#-~]+"  # visible ASCII but the quote: an unquoted key
# What the header may hold: FastAPI checks it (422 else), and the document says it. A
# value of at most 255 characters that fits holds a key of 1 to 255.
KEY_PATTERN = rf'^(?:"{_CHAR}+"|{_BARE})$'


def key_of(value: str) -> str:
    """The key a header value that fits ``KEY_PATTERN`` names: a quoted one unquoted."""
    if value.startswith('"'):
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


async def _idempotency_key(
    idempotency_key: Annotated[
        str | None,
        Header(
            description="a key of yours for this request: a quoted string of printable "
            "ASCII (or a bare one of visible ASCII), 255 characters at most; the request "
            "sent again with it is answered as the first was, and does nothing again; sent "
            "with another command or body, it is refused (422)",
            examples=['"8e03978e-40d5-43e8-bc93-6894a57f9324"'],
            pattern=KEY_PATTERN,
            max_length=MAX_KEY_LENGTH,
        ),
    ] = None,
) -> str | None:
    return None if idempotency_key is None else key_of(idempotency_key)


IdempotencyKey = Annotated[str | None, Depends(_idempotency_key)]
