"""The one rule for JSON read from a request: what is not JSON, and an object that names
a member twice, is an ``InvalidJSON`` (400, ``/problems/invalid-json``) naming what is
wrong. I-JSON (RFC 7493 §2.3), which the CloudEvents JSON format relies on, forbids
duplicate names; parsers keep the last one, so ``{"id":"A","id":"B"}`` would store ``B``.

Two readers, one rule:

- ``loads`` (orjson) for ``POST /events`` and GraphQL, the hot paths. orjson keeps the last
  of duplicate names and cannot say it saw one, so the document is checked after it
  is read: every ``:`` outside a string separates a member, so a body holds duplicate
  names exactly when it has more ``:`` than the document written back compactly (one
  per member, plus those inside strings, where a colon may be spelled ``\\u003a``, which
  is counted too). The count is exact: a body that fails it is read again with the
  standard library, which names the duplicate (up to ``WHOLE_BYTES``; past it, the
  refusal does not name it, as that pass would hold the event loop). Two C-speed
  counts and a compact write: about 3 µs for a typical event of 424 bytes, whose
  reading by orjson takes 2.6 µs (``python -m timeit``, in the commit).
- ``array_items`` for a batch past ``WHOLE_BYTES``: its items one at a time, each read
  by the standard library with an ``object_pairs_hook`` that sees each object's pairs,
  so that the server runs other tasks between them.
- ``loads_standard`` (the standard library) for the other JSON endpoints, whose routes
  check numbers orjson would not read (past 64 bits), and which are not hot.

And a JSON body is UTF-8: ``refuse_other_charsets`` refuses (415) a JSON content type
that says another charset.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

import orjson

from app.errors import InvalidJSON, UnsupportedMediaType
from app.store.records import DuplicateMember, unique_members


def loads(body: bytes, what: str = "the body") -> Any:
    """``body`` read with orjson, refused when it is not JSON or names a member twice."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidJSON(f"{what} is not valid JSON: {exc}") from None
    colons = body.count(b":")
    if colons == 0:
        return document
    try:
        written = orjson.dumps(document)
    except orjson.JSONEncodeError:  # nests past orjson's 254 levels: the slow way
        written = b""
    # A colon in a string that the body spells as an escape is one the body lacks.
    escaped = len(_ESCAPED_COLON.findall(body)) if b"\\u003" in body else 0
    if colons + escaped != written.count(b":"):
        if len(body) > WHOLE_BYTES:  # naming it would take the standard library's pass
            raise InvalidJSON(
                f"{what} names a member twice in one object, which I-JSON (RFC 7493) forbids "
                f"(a body over {WHOLE_BYTES} bytes is not read again to say which)"
            )
        try:
            json.loads(body, object_pairs_hook=unique_members)
        except DuplicateMember as exc:
            raise _duplicated(exc.name, what) from None
        except RecursionError:
            # Past about 1,000 levels, the standard library cannot read it: unchecked.
            # The readers refuse data past 128 levels (MAX_DATA_DEPTH) on their own.
            pass
    return document


def loads_standard(body: bytes | str, what: str = "the body") -> Any:
    """``body`` read with the standard library, refused when it is not JSON or names a
    member twice."""
    try:
        return json.loads(body, object_pairs_hook=unique_members)
    except DuplicateMember as exc:
        raise _duplicated(exc.name, what) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidJSON(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidJSON(f"{what} nests arrays and objects too deep to read") from None


# \u003a or \u003A after an even number of backslashes (each pair is one, escaped): a
# colon. (Outside strings JSON has no backslash.)
_ESCAPED_COLON = re.compile(rb"(?<!\\)(?:\\\\)*\\u003[aA]")
# A body past this is read an item at a time (``array_items``) rather than at once.
WHOLE_BYTES = 1 << 20
_NOT_SPACE = re.compile(r"[^ \t\n\r]")


def is_array(body: bytes) -> bool:
    """Whether ``body``'s JSON text starts as an array (its first byte but white space)."""
    return body.lstrip(b" \t\n\r")[:1] == b"["


def array_items(body: bytes, what: str = "the body") -> Iterator[Any]:
    """The items of the JSON array ``body`` (``is_array``), read one at a time, so that a
    caller can let other tasks run between them: orjson reads a body in one call, which
    for 16 MiB of events held the event loop for a tenth of a second and more. Each item
    is read by the standard library under the same rule as ``loads`` (a member named
    twice, ``NaN``, a lone surrogate are refused; an integer past 64 bits is a float, as
    orjson reads it)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidJSON(f"{what} is not valid JSON: it is not UTF-8 ({exc})") from None
    at = _skip(text, text.index("[") + 1)
    if text.startswith("]", at):
        _end_of_array(text, at + 1, what)
        return
    while True:
        try:
            item, at = _DECODER.raw_decode(text, at)
            orjson.dumps(item)  # a lone surrogate (which orjson would not have read)
        except DuplicateMember as exc:
            raise _duplicated(exc.name, what) from None
        except (json.JSONDecodeError, _NotJSON, orjson.JSONEncodeError) as exc:
            raise InvalidJSON(f"{what} is not valid JSON: {exc} (item at char {at})") from None
        except RecursionError:
            raise InvalidJSON(f"{what} nests arrays and objects too deep to read") from None
        yield item
        at = _skip(text, at)
        if text.startswith(",", at):
            at = _skip(text, at + 1)
        elif text.startswith("]", at):
            _end_of_array(text, at + 1, what)
            return
        else:
            raise InvalidJSON(f"{what} is not valid JSON: expected ',' or ']' at char {at}")


def _skip(text: str, at: int) -> int:
    """Where the first character but white space from ``at`` is (the end: none)."""
    found = _NOT_SPACE.search(text, at)
    return len(text) if found is None else found.start()


def _end_of_array(text: str, at: int, what: str) -> None:
    if _skip(text, at) != len(text):
        raise InvalidJSON(f"{what} is not valid JSON: more after the array, at char {at}")


class _NotJSON(ValueError):
    pass


def _constant(name: str) -> Any:
    raise _NotJSON(f"{name} is not a JSON number")


def _integer(text: str) -> int | float:
    if len(text) > 20:  # past 64 bits (and int() refuses past 4,300 digits: a ValueError)
        return _float(text)
    value = int(text)
    return value if -(1 << 63) <= value < 1 << 64 else _float(text)


def _float(text: str) -> float:
    """A number as orjson reads it: one past a double's range (``1e400``) is refused, not
    read as infinity (which then failed the event, not the JSON, in a large batch only)."""
    value = float(text)
    if math.isinf(value):
        raise _NotJSON(f"{text[:32]} is past the range of a JSON number read as a double")
    return value


def refuse_other_charsets(content_type: str) -> None:
    """Refuse (415) a JSON ``content_type`` whose ``charset`` is not UTF-8: JSON exchanged
    between systems is UTF-8 (RFC 8259 §8.1), which is how every body is read, so a body
    said to be in another charset would be read as something it is not. Content types
    that are not JSON are left alone."""
    essence, *parameters = content_type.split(";")
    essence = essence.strip().lower()
    if not (essence.endswith("/json") or essence.endswith("+json")):
        return
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() != "charset":
            continue
        charset = value.strip().strip('"').lower()
        if charset not in ("utf-8", "utf8"):
            raise UnsupportedMediaType(
                f"charset {charset!r} is not supported: a JSON body is UTF-8 "
                "(send charset=utf-8, or no charset)",
                charset=charset,
            )


def _duplicated(name: str, what: str) -> InvalidJSON:
    return InvalidJSON(
        f"{what} names the member {name!r} twice in one object; JSON read by Causeway is "
        "I-JSON (RFC 7493), which forbids duplicate names",
        member=name,
    )


_DECODER = json.JSONDecoder(
    object_pairs_hook=unique_members,
    parse_constant=_constant,
    parse_int=_integer,
    parse_float=_float,
)
