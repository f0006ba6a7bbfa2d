"""The keyset cursors of GraphQL's pages of events: each names an event by its position,
and the position of the next event its page knew of (see ``encode_cursor``)."""

import base64

from app.errors import BadRequest
from app.store.records import parse_position

_CURSOR_PREFIX = "position:"
_SHOWN_AT = "@"


def encode_cursor(position: int, shown_at: int | None = None) -> str:
    """The cursor of the event at ``position``; ``shown_at``: the position of the next
    event its page knew of, which a page read after the cursor must show (it may be read
    on another replica, one behind the one that announced it: ``cursor_shown_at``)."""
    text = f"{_CURSOR_PREFIX}{position}"
    if shown_at is not None:
        text += f"{_SHOWN_AT}{shown_at}"
    return base64.urlsafe_b64encode(text.encode()).decode()


def decode_cursor(cursor: str | None) -> int:
    """The position of the event ``cursor`` names (0: none given)."""
    return _decoded(cursor)[0] if cursor is not None else 0


def cursor_shown_at(cursor: str | None) -> int | None:
    """The position a read after ``cursor`` must show (``encode_cursor``), if it says one."""
    return _decoded(cursor)[1] if cursor is not None else None


def _decoded(cursor: str) -> tuple[int, int | None]:
    try:
        text = base64.urlsafe_b64decode(cursor.encode()).decode()
    except (ValueError, UnicodeDecodeError):
        text = ""
    if text.startswith(_CURSOR_PREFIX):
        named, _, shown = text[len(_CURSOR_PREFIX) :].partition(_SHOWN_AT)
        position = parse_position(named)
        shown_at = parse_position(shown) if shown else None
        if position is not None and (shown_at is not None or not shown):
            return position, shown_at
    raise BadRequest(f"cursor {cursor!r} is not one this API gave out", cursor=cursor)
