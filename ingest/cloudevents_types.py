"""What CloudEvents 1.0's type system (spec.md) lets an attribute be: its name (lower-case
letters and digits), a String (no control character, no Unicode noncharacter), an
Integer (32 bits), and the formats of the attributes that have one."""

from __future__ import annotations

import re

NAME = re.compile(r"^[a-z0-9]+\Z")  # \Z: "$" would let a trailing newline through
# CloudEvents' String type disallows control characters and Unicode's noncharacters
# (U+FDD0-U+FDEF, and the last two code points of each of the 17 planes).
_NONCHARACTERS = "\ufdd0-\ufdef" + "".join(
    chr(plane << 16 | 0xFFFE) + chr(plane << 16 | 0xFFFF) for plane in range(17)
)
DISALLOWED = re.compile(f"[\x00-\x1f\x7f-\x9f{_NONCHARACTERS}]")
INT32 = (-(2**31), 2**31 - 1)
# CloudEvents: datacontenttype is an RFC 2046 media type (type "/" subtype, then
# parameters), dataschema an absolute URI (a scheme, then no whitespace), source a
# URI-reference: none of the characters RFC 3986 leaves out of every URI (whitespace,
# and < > " { } | \\ ^ `). Characters past ASCII are let through in both (IRIs, as
# producers send them; stored ones stay re-sendable as duplicates).
_MEDIA_NAME = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
FORMATS = {
    "datacontenttype": (
        re.compile(rf"^{_MEDIA_NAME}/{_MEDIA_NAME}[ \t]*(?:;.*)?\Z"),
        "a media type such as application/json",
    ),
    "dataschema": (re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:\S*\Z"), "an absolute URI"),
    "source": (re.compile(r'^[^\s<>"{}|\\^`]*\Z'), "a URI-reference"),  # empty: required
}
