"""A fuzz test of the CloudEvents parser (``ingest.binding``, ``ingest.attributes``,
``app.web.json_text``): whatever bytes and headers come in, the answer is events or a
clean problem (400, 413, 415 or 422, rendered as the service renders it), never another
exception; and an event written in any of the three modes reads back as itself.

The inputs start from a corpus of what probes of the service sent (issue 37: a member
named twice, a charset other than UTF-8, a ``ce-`` header whose percent-encoding does not
decode, an id twice in one batch, ...), mutated byte by byte, and from events generated
whole. CI runs a few hundred examples of each (a few seconds); ``make fuzz`` runs
``CAUSEWAY_FUZZ=long``, many thousands, with Hypothesis's example database in
``.hypothesis/`` so that a failure found there is tried first next time.
"""

from __future__ import annotations

import base64
import os
import string
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from app.errors import AppError, InvalidJSON
from app.store.records import NewEvent
from app.web import json_text, problems
from ingest.attributes import RESERVED_ID_PREFIXES, SET_BY_STORE
from ingest.binding import BATCH, STRUCTURED, parse_request
from ingest.limits import Limits

_LONG = os.environ.get("CAUSEWAY_FUZZ") == "long"
FUZZ = settings(
    max_examples=20_000 if _LONG else 100,
    deadline=None,
    database=DirectoryBasedExampleDatabase(".hypothesis/examples") if _LONG else None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
LIMITS = Limits(max_attributes_bytes=1024, max_event_data_bytes=4096, max_batch_events=8)
CLEAN = {400, 413, 415, 422}

_EVENT = b'{"specversion":"1.0","id":"A","source":"/s","type":"t","data":{"x":1}}'
# What the probes of issue 37 sent, and their relatives: the seeds of every mutation.
CORPUS: list[tuple[str | None, list[tuple[bytes, bytes]], bytes]] = [
    (STRUCTURED, [], _EVENT),
    (STRUCTURED, [], b'{"specversion":"1.0","id":"A","id":"B","source":"/s","type":"t"}'),
    (STRUCTURED, [], b'{"specversion":"1.0","id":"A","source":"/s","type":"t","\\u0069d":"B"}'),
    (STRUCTURED, [], b'{"specversion":"1.0","id":"A","source":"/s","type":"t","data":{"k":1,"k":2}}'),
    (f"{STRUCTURED}; charset=latin-1", [], _EVENT),
    (f"{STRUCTURED}; charset=utf-8", [], _EVENT),
    (f"{STRUCTURED}; charset=\"UTF-8\"", [], _EVENT),
    (BATCH, [], b"[" + _EVENT + b"," + _EVENT + b"]"),
    (BATCH, [], b"[]"),
    (f"{BATCH}; charset=utf-16", [], b"[" + _EVENT + b"]"),
    ("application/cloudevents-batch+xml", [], b"[]"),
    ("application/cloudevents+xml", [], _EVENT),
    (STRUCTURED, [], b'{"specversion":"1.0","id":"A","source":"/s","type":"t","data_base64":"AA=="}'),
    (STRUCTURED, [], b'{"specversion":"1.0","id":"A","source":"/s","type":"t","data":1,"data_base64":"AA=="}'),
    (STRUCTURED, [], b'{"specversion":"1.0","id":"A","source":"/s","type":"t","data":"\\u0000"}'),
    (STRUCTURED, [], b'{"specversion":"1.0","id":"A","source":"/s","type":"t","data":"\\ud800"}'),
    (STRUCTURED, [], b'{"specversion":"1.0","id":"A","source":"/s","type":"t","data":1e400}'),
    (STRUCTURED, [], b'{"specversion":"1.0","id":"A","source":"/s","type":"t","data":18446744073709551616}'),
    (STRUCTURED, [], b'{"specversion":"1.0","id":"A","source":"/s","type":"t","data":' + b"[" * 200 + b"]" * 200 + b"}"),
    (STRUCTURED, [], b'{"specversion":"1.0","id":"A","source":"/s","type":"causeway.model.registered"}'),
    (STRUCTURED, [], b'{"specversion":"1.0","id":"A","source":"/s","type":"t","position":1,"causationid":"A"}'),
    (STRUCTURED, [], b'{"specversion":"1.0","id":"A","source":"/s","type":"t","expectedversion":1e10}'),
    (STRUCTURED, [], b'\xef\xbb\xbf{"specversion":"1.0","id":"A","source":"/s","type":"t"}'),
    ("application/json", [(b"ce-specversion", b"1.0"), (b"ce-id", b"x-%ZZ"), (b"ce-source", b"/s"), (b"ce-type", b"t")], b"{}"),
    ("text/plain", [(b"ce-specversion", b"1.0"), (b"ce-id", b"%C3%28"), (b"ce-source", b"/s"), (b"ce-type", b"t")], b"hi"),
    ("text/plain", [(b"ce-specversion", b"1.0"), (b"ce-id", b'"a\\"b"'), (b"ce-source", b"/%E2%82%AC"), (b"ce-type", b"t")], b""),
    (None, [(b"ce-specversion", b"1.0"), (b"ce-id", b"a"), (b"CE-ID", b"b"), (b"ce-source", b"/s"), (b"ce-type", b"t")], b""),
    ("application/json; charset=iso-8859-1", [(b"ce-specversion", b"1.0"), (b"ce-id", b"a"), (b"ce-source", b"/s"), (b"ce-type", b"t")], b'{"a":1,"a":2}'),
    ("application/octet-stream", [(b"ce-specversion", b"1.0"), (b"ce-id", b"a"), (b"ce-source", b"/s"), (b"ce-type", b"t"), (b"ce-expectedversion", b"99999999999"), (b"ce-datacontenttype", b"x/y")], b"\x00\xff"),
    ("application/json", [], b"{}"),
    (STRUCTURED, [], b'{"specversion":"1.0","id":"A","source":"/s","type":"t","subject":"s","time":"2026-12-05T13:22:34.030523+01:00","causationid":"B, C","correlationid":"r","modelname":"m","modelversion":"1","modelsig":"sha256:00","expectedversion":0,"dataschema":"urn:x","datacontenttype":"application/json","x1":true,"x2":-7}'),
    ("text/plain; charset=utf-8", [(b"ce-specversion", b"1.0"), (b"ce-id", b"A"), (b"ce-source", b"/s"), (b"ce-type", b"t"), (b"ce-time", b"2026-02-30T25:61:00Z"), (b"ce-expectedversion", b"007"), (b"ce-causationid", b"B,,C"), (b"ce-modelsig", b"x")], b"text"),
]  # fmt: skip

# A byte a mutation puts in: JSON's punctuation, escapes, digits, what breaks UTF-8.
_BYTES = st.sampled_from([*b'{}[]":,\\u0%-+.eE \t\n\x00\x7f\x80\xc3\xffA'])


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str | None, list[tuple[bytes, bytes]], bytes]:
    """A corpus request with a few bytes of its body or one header changed."""
    content_type, headers, body = draw(st.sampled_from(CORPUS))
    data = bytearray(body)
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(data)))
        how = draw(st.sampled_from(["insert", "replace", "delete", "repeat"]))
        if how == "insert":
            data[at:at] = bytes(draw(st.lists(_BYTES, min_size=1, max_size=4)))
        elif how == "replace" and at < len(data):
            data[at] = draw(_BYTES)
        elif how == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif how == "repeat":
            data[at:at] = data[at : at + draw(st.integers(1, 40))]
    changes_a_header = draw(st.booleans())
    if headers and changes_a_header:
        headers = list(headers)
        which = draw(st.integers(0, len(headers) - 1))
        name, value = headers[which]
        headers[which] = (name, draw(st.one_of(st.just(value), st.binary(max_size=12))))
    return content_type, headers, bytes(data)


def _parse_or_problem(
    content_type: str | None, headers: list[tuple[bytes, bytes]], body: bytes
) -> list[NewEvent] | None:
    """The events, or None after checking the refusal is a clean problem."""
    try:
        return parse_request(content_type, headers, body, LIMITS)
    except AppError as exc:
        refused = exc
    assert refused.status in CLEAN, f"{type(refused).__name__} ({refused.status}): {refused.detail}"
    answer = problems.response_for(refused, "POST", "/events")  # renders, or raises here
    assert orjson.loads(answer.body)["status"] == refused.status
    return None


_TEXT = st.text(st.characters(codec="utf-8"), max_size=6)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(children, max_size=4) | st.dictionaries(_TEXT, children, max_size=4)


class TestAnyInput:
    @FUZZ
    @given(mutated())
    def test_a_mutated_request_gives_events_or_a_clean_problem(
        self, sent: tuple[str | None, list[tuple[bytes, bytes]], bytes]
    ) -> None:
        _parse_or_problem(*sent)

    @FUZZ
    @given(
        st.sampled_from([STRUCTURED, BATCH, "application/json", "text/plain", None]),
        st.lists(
            st.tuples(
                st.sampled_from([b"ce-id", b"ce-source", b"ce-type", b"ce-specversion", b"ce-x"]),
                st.binary(max_size=16),
            ),
            max_size=5,
        ),
        st.binary(max_size=200),
    )
    @example(STRUCTURED, [], b'{"id":"A","id":"B"}')
    def test_arbitrary_bytes_give_events_or_a_clean_problem(
        self, content_type: str | None, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> None:
        _parse_or_problem(content_type, headers, body)

    @FUZZ
    @given(
        st.recursive(
            st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | _TEXT, _containers
        )
    )
    def test_both_json_readers_agree(self, value: Any) -> None:
        # One rule, two readers: a batch past json_text.WHOLE_BYTES is read an item at a
        # time by the standard library, a smaller one at once by orjson.
        body = b"[" + orjson.dumps(value) + b"]"
        assert list(json_text.array_items(body)) == json_text.loads(body)

    @FUZZ
    @given(mutated())
    @example((BATCH, [], b'{"data":1e400}'))  # orjson refused it; the other read infinity
    @example((BATCH, [], b"1" * 5000))  # past int()'s 4,300 digits: a ValueError, a 500
    def test_both_json_readers_take_and_refuse_the_same_arrays(
        self, sent: tuple[str | None, list[tuple[bytes, bytes]], bytes]
    ) -> None:
        body = b"[" + sent[2] + b"]"
        assert _outcome(lambda: list(json_text.array_items(body))) == _outcome(
            lambda: json_text.loads(body)
        )


def _outcome(read: Callable[[], Any]) -> tuple[bool, Any]:
    """Whether ``read`` took the text, and what it read (None when it refused it)."""
    try:
        return True, read()
    except InvalidJSON:
        return False, None


# Generated events, every attribute kind the binding carries.
_PRINTABLE = st.text(
    st.characters(codec="utf-8", categories=["L", "N", "P", "S", "Zs"]), min_size=1, max_size=12
)
_ID = _PRINTABLE.filter(lambda s: "," not in s and s == s.strip()).filter(
    lambda s: not s.startswith(tuple(RESERVED_ID_PREFIXES))
)
# A URI-reference, as CloudEvents' source is: none of the characters RFC 3986 leaves out.
_SOURCE = st.text(
    st.characters(codec="utf-8", categories=["L", "N", "P", "S"], exclude_characters='<>"{}|\\^`'),
    min_size=1,
    max_size=12,
).filter(lambda s: not s.startswith(tuple(RESERVED_ID_PREFIXES)))
_KNOWN = {
    "id", "source", "type", "subject", "time", "datacontenttype", "dataschema", "specversion",
    "data", "stream", "expectedversion", "causationid", "correlationid", "modelname",
    "modelversion", "modelsig",
}  # fmt: skip
_EXTENSION_NAME: st.SearchStrategy[str] = st.text(
    string.ascii_lowercase + string.digits, min_size=1, max_size=10
).filter(lambda name: name not in SET_BY_STORE and name not in _KNOWN)
_JSON_DATA = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=4),
            children,
            max_size=3,
        )
    ),
    max_leaves=8,
)


@st.composite
def events(draw: st.DrawFn) -> dict[str, Any]:
    """A valid event in the JSON format (attributes as strings, as binary mode has them)."""
    event: dict[str, Any] = {
        "specversion": "1.0",
        "id": draw(_ID),
        "source": draw(_SOURCE),
        "type": draw(_ID.filter(lambda s: not s.startswith("causeway."))),
    }
    if draw(st.booleans()):
        event["subject"] = draw(_ID)
    if draw(st.booleans()):
        event["time"] = "2026-12-05T13:22:34.030523Z"
    if draw(st.booleans()):
        event["correlationid"] = draw(_ID)
    if draw(st.booleans()):
        event["causationid"] = draw(_ID.filter(lambda s: s != event["id"]))
    if draw(st.booleans()):
        event["modelname"], event["modelversion"] = draw(_ID), draw(_ID)
    for name in draw(st.lists(_EXTENSION_NAME, max_size=3, unique=True)):
        event[name] = draw(_ID)
    event["data"] = draw(_JSON_DATA)
    return event


_HEADER_SAFE = "".join(c for c in string.printable if c not in ' "%\t\n\r\x0b\x0c')


def _binary(event: dict[str, Any]) -> tuple[str, list[tuple[bytes, bytes]], bytes]:
    """``event`` in binary mode: each attribute a percent-encoded ``ce-`` header."""
    headers = [
        (f"ce-{name}".encode(), quote(value, safe=_HEADER_SAFE).encode("ascii"))
        for name, value in event.items()
        if name != "data"
    ]
    return "application/json", headers, orjson.dumps(event["data"])


def _read_back(sent: dict[str, Any], got: NewEvent, *, binary: bool) -> None:
    assert (got.id, got.source, got.type, got.subject) == (
        sent["id"], sent["source"], sent["type"], sent.get("subject"),
    )  # fmt: skip
    assert got.stream == sent.get("subject", sent["source"])
    assert got.time == sent.get("time")
    assert got.correlation_id == sent.get("correlationid")
    assert got.causes == ((sent["causationid"],) if "causationid" in sent else ())
    assert (got.model_name, got.model_version) == (sent.get("modelname"), sent.get("modelversion"))
    assert got.has_data
    assert got.data == sent["data"]
    if binary:
        assert got.datacontenttype == "application/json"
    extensions = {k: v for k, v in sent.items() if k not in _KNOWN}
    assert got.extensions == extensions


class TestRoundTrip:
    @FUZZ
    @given(events())
    def test_a_structured_event_reads_back_as_itself(self, event: dict[str, Any]) -> None:
        [got] = parse_request(STRUCTURED, [], orjson.dumps(event), LIMITS)
        _read_back(event, got, binary=False)

    @FUZZ
    @given(st.lists(events(), min_size=1, max_size=4))
    def test_a_batch_reads_back_as_its_events_in_order(self, batch: list[dict[str, Any]]) -> None:
        # Ids twice in one batch are the store's to refuse (naming both), not the parser's.
        got = parse_request(BATCH, [], orjson.dumps(batch), LIMITS)
        assert len(got) == len(batch)
        for sent, read in zip(batch, got, strict=True):
            _read_back(sent, read, binary=False)

    @FUZZ
    @given(events())
    def test_a_binary_event_reads_back_as_itself(self, event: dict[str, Any]) -> None:
        [got] = parse_request(*_binary(event), LIMITS)
        _read_back(event, got, binary=True)

    @FUZZ
    @given(st.binary(max_size=64))
    def test_binary_data_reads_back_in_either_mode(self, data: bytes) -> None:
        event = {"specversion": "1.0", "id": "A", "source": "/s", "type": "t"}
        as_base64 = {**event, "data_base64": base64.b64encode(data).decode()}
        [structured] = parse_request(STRUCTURED, [], orjson.dumps(as_base64), LIMITS)
        headers = [(f"ce-{k}".encode(), v.encode()) for k, v in event.items()]
        [binary] = parse_request("application/octet-stream", headers, data, LIMITS)
        assert structured.data_binary == data
        assert binary.data_binary == (data or None)


@pytest.mark.parametrize(("content_type", "headers", "body"), CORPUS)
def test_each_corpus_request_gives_events_or_a_clean_problem(
    content_type: str | None, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    _parse_or_problem(content_type, headers, body)
