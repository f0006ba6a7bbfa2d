"""RFC 3339 timestamps, as CloudEvents ``time`` and the read filters use them."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

from app.errors import BadRequest

# ASCII digits only (a str pattern's \d takes every script's), and a fraction of any
# length (RFC 3339's time-secfrac is "." 1*DIGIT), cut to microseconds when read.
_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)\Z",
    re.ASCII,
)


def parse_rfc3339(text: str) -> tuple[datetime | None, str | None]:
    """The instant (to the microsecond) and None, or None and why ``text`` is not RFC 3339."""
    if _RFC3339.match(text) is not None:
        # RFC 3339 is a subset of what fromisoformat reads (Python 3.11+), upper-cased for
        # its 't' and 'z'; like the parse below, it truncates a fraction to microseconds.
        try:
            value = datetime.fromisoformat(text.upper())
        except ValueError:
            pass  # an impossible date or offset, or a leap second: the parse below decides
        else:
            why = _out_of_range(text, value)
            return (value, None) if why is None else (None, why)
    return _parse_explained(text)


def _out_of_range(text: str, value: datetime) -> str | None:
    """Why the instant cannot be stored and read back (PostgreSQL takes it, but a year
    outside 1-9999 in UTC does not read back into Python), or None."""
    try:
        value.astimezone(UTC)
    except OverflowError:
        return f"time {text!r} falls outside the years 0001-9999 in UTC"
    return None


def _parse_explained(text: str) -> tuple[datetime | None, str | None]:
    match = _RFC3339.match(text)
    if match is None:
        return None, f"time {text!r} is not an RFC 3339 timestamp"
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    leap = second == "60"
    if offset in ("Z", "z"):
        zone = UTC
    else:
        sign = 1 if offset[0] == "+" else -1
        zone = timezone(sign * timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6])))
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    try:
        value = datetime(
            int(year), int(month), int(day), int(hour), int(minute), 59 if leap else int(second),
            999_999 if leap else micros, zone,
        )  # fmt: skip
    except ValueError as exc:
        return None, f"time {text!r} is not a valid date and time: {exc}"
    if (why := _out_of_range(text, value)) is not None:
        return None, why
    if leap and value.astimezone(UTC).strftime("%H:%M") != "23:59":
        return None, f"time {text!r} names second 60, which only the last minute of a UTC day has"
    # A leap second (RFC 3339 allows it): its text is kept as sent, and its instant is the
    # last microsecond before the next minute (Python has no second 60).
    return value, None


def parse_time_parameter(name: str, text: str | None) -> datetime | None:
    """A request's time parameter: None when absent, a ``BadRequest`` when malformed."""
    if text is None:
        return None
    value, why = parse_rfc3339(text)
    if value is None:
        raise BadRequest(f"{name}: {why}", parameter=name)
    return value
