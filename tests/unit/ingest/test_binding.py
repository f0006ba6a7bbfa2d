"""The CloudEvents HTTP binding, without a database: modes, decoding and validation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest

from app.errors import (
    EventTooLarge,
    InvalidCloudEvent,
    InvalidEvent,
    InvalidJSON,
    PayloadTooLarge,
    ReservedType,
    UnsupportedMediaType,
)
from app.store.records import MAX_DATA_DEPTH, is_json_media_type
from app.store.timestamps import parse_rfc3339
from ingest.binding import BATCH, PART_EVENTS, parse_in_parts, parse_request
from ingest.limits import Limits

LIMITS = Limits()
BASE = {"specversion": "1.0", "id": "1", "source": "/s", "type": "t"}


def structured(**members: object) -> bytes:
    return orjson.dumps({**BASE, **members})


class TestModeSelection:
    def test_content_type_alone_picks_structured_even_with_ce_headers(self) -> None:
        events = parse_request(
            "Application/CloudEvents+JSON; charset=utf-8",
            [(b"ce-id", b"from-header")],
            structured(),
            LIMITS,
        )
        assert events[0].id == "1"

    def test_batch_mode(self) -> None:
        body = orjson.dumps([BASE, {**BASE, "id": "2"}])
        events = parse_request("application/cloudevents-batch+json", [], body, LIMITS)
        assert [e.id for e in events] == ["1", "2"]

    def test_a_large_batch_is_built_in_parts_with_the_same_events(self) -> None:
        # A server lets other tasks run between parts (an append holding the log head).
        batch = [{**BASE, "id": str(n)} for n in range(3 * PART_EVENTS + 1)]
        body = orjson.dumps(batch)
        parts = list(parse_in_parts(BATCH, [], body, LIMITS))
        assert [len(p) for p in parts] == [PART_EVENTS] * 3 + [1]
        events = [e for p in parts for e in p]
        assert events == parse_request(BATCH, [], body, LIMITS)
        assert [e.id for e in events] == [str(n) for n in range(len(batch))]

    def test_a_bad_event_in_a_later_part_refuses_the_batch(self) -> None:
        batch = [{**BASE, "id": str(n)} for n in range(PART_EVENTS + 2)]
        batch[-1] = {**BASE, "id": "x", "type": ""}
        with pytest.raises(InvalidCloudEvent) as refused:
            parse_request(BATCH, [], orjson.dumps(batch), LIMITS)
        assert str(refused.value).startswith(f"event {PART_EVENTS + 1}:")

    def test_other_formats_are_unsupported(self) -> None:
        with pytest.raises(UnsupportedMediaType):
            parse_request("application/cloudevents+protobuf", [], b"", LIMITS)

    def test_a_batch_over_the_event_limit_is_too_large(self) -> None:
        body = orjson.dumps([BASE] * 3)
        with pytest.raises(PayloadTooLarge):
            parse_request(
                "application/cloudevents-batch+json", [], body, Limits(max_batch_events=2)
            )


class TestBinaryMode:
    def test_lower_case_hex_and_quoted_strings_are_accepted(self) -> None:
        headers = [
            (b"ce-specversion", b"1.0"),
            (b"ce-id", b"%e2%82%ac"),
            (b"ce-source", b"/s"),
            (b"ce-subject", b'"a\\"b"'),
            (b"ce-type", b"t"),
            (b"ce-expectedversion", b"4"),
        ]
        [event] = parse_request("text/plain", headers, b"hi", LIMITS)
        assert (event.id, event.subject, event.expected_version) == ("€", 'a"b', 4)
        assert event.data_binary == b"hi"

    @pytest.mark.parametrize(
        ("sent", "detail"),
        [
            ("%C2%B2", "non-negative integer"),  # "²": a digit to str.isdigit, not to int()
            ("%D9%A0", "non-negative integer"),  # an Arabic-Indic zero
            ("9" * 5000, "32-bit"),  # past what int() reads
            ("2147483648", "32-bit"),
            ("-1", "non-negative integer"),
        ],
    )
    def test_expectedversion_is_ascii_digits_within_32_bits(self, sent: str, detail: str) -> None:
        headers = [
            (b"ce-specversion", b"1.0"),
            (b"ce-id", b"1"),
            (b"ce-source", b"/s"),
            (b"ce-type", b"t"),
            (b"ce-expectedversion", sent.encode()),
        ]
        with pytest.raises(InvalidCloudEvent, match=detail) as refused:
            parse_request("text/plain", headers, b"x", LIMITS)
        assert refused.value.extensions["errors"][0]["attribute"] == "expectedversion"

    @pytest.mark.parametrize(("sent", "expected"), [("0" * 21 + "1", 1), ("0" * 900, 0)])
    def test_expectedversion_may_have_leading_zeros(self, sent: str, expected: int) -> None:
        headers = [(b"ce-specversion", b"1.0"), (b"ce-id", b"1"), (b"ce-source", b"/s"),
                   (b"ce-type", b"t"), (b"ce-expectedversion", sent.encode())]  # fmt: skip
        [event] = parse_request("text/plain", headers, b"x", LIMITS)
        assert event.expected_version == expected

    def test_a_content_type_that_is_no_media_type_is_refused(self) -> None:
        headers = [(b"ce-specversion", b"1.0"), (b"ce-id", b"1"), (b"ce-source", b"/s"),
                   (b"ce-type", b"t")]  # fmt: skip
        with pytest.raises(InvalidCloudEvent, match="datacontenttype must be a media type"):
            parse_request("json", headers, b"{}", LIMITS)

    def test_raw_non_ascii_bytes_are_refused(self) -> None:
        headers = [
            (b"ce-specversion", b"1.0"),
            (b"ce-id", "é".encode()),
            (b"ce-source", b"/s"),
            (b"ce-type", b"t"),
        ]
        with pytest.raises(InvalidCloudEvent):
            parse_request(None, headers, b"", LIMITS)

    @pytest.mark.parametrize("sent", [b"x-%ZZ", b"x-%4", b"100%", b"%g0"])
    def test_a_percent_that_does_not_decode_is_refused(self, sent: bytes) -> None:
        headers = [(b"ce-specversion", b"1.0"), (b"ce-id", sent), (b"ce-source", b"/s"),
                   (b"ce-type", b"t")]  # fmt: skip
        with pytest.raises(InvalidCloudEvent, match="two hexadecimal digits") as refused:
            parse_request(None, headers, b"", LIMITS)
        assert refused.value.extensions["errors"][0]["attribute"] == "id"

    def test_a_percent_encoded_percent_is_a_percent(self) -> None:
        headers = [(b"ce-specversion", b"1.0"), (b"ce-id", b"100%25"), (b"ce-source", b"/s"),
                   (b"ce-type", b"t")]  # fmt: skip
        assert parse_request(None, headers, b"", LIMITS)[0].id == "100%"


class TestJSONRule:
    """The one rule for JSON (``app.web.json_text``) as the binding applies it."""

    @pytest.mark.parametrize(
        "body",
        [
            b'{"specversion":"1.0","id":"A","id":"B","source":"/s","type":"t"}',
            b'{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{"k":1,"k":1}}',
            b'{"specversion":"1.0","id":"1","source":"/s","type":"t","x":"\\u003a","x":"y"}',
        ],
    )
    def test_a_member_named_twice_is_refused(self, body: bytes) -> None:
        with pytest.raises(InvalidJSON, match="twice"):
            parse_request("application/cloudevents+json", [], body, LIMITS)

    def test_a_duplicate_inside_a_batch_event_is_refused(self) -> None:
        body = b"[" + structured() + b"," + structured(id="2")[:-1] + b',"type":"u"}]'
        with pytest.raises(InvalidJSON, match="'type'"):
            parse_request(BATCH, [], body, LIMITS)

    def test_colons_and_escaped_colons_in_strings_are_no_duplicates(self) -> None:
        body = structured(subject="a:b:c", data={"t": "12:00:00"})[:-1] + b',"x":"\\u003A"}'
        (parsed,) = parse_request("application/cloudevents+json", [], body, LIMITS)
        assert parsed.data == {"t": "12:00:00"}

    @pytest.mark.parametrize(
        "content_type",
        ["application/cloudevents+json; charset=latin-1", f'{BATCH}; charset="utf-16"'],
    )
    def test_another_charset_is_unsupported(self, content_type: str) -> None:
        with pytest.raises(UnsupportedMediaType, match="charset"):
            parse_request(content_type, [], b"[]", LIMITS)

    def test_utf8_is_the_charset_of_json(self) -> None:
        content_type = "application/cloudevents+json; charset=UTF-8"
        assert parse_request(content_type, [], structured(), LIMITS)[0].id == "1"


class TestValidation:
    def test_extensions_are_kept_and_lineage_attributes_split_out(self) -> None:
        body = structured(
            causationid="a, b",
            correlationid="run",
            modelname="m",
            modelversion="2",
            modelsig="sha256:ab",
            stream="st",
            expectedversion=3,
            priority=7,
            urgent=True,
        )
        [event] = parse_request("application/cloudevents+json", [], body, LIMITS)
        assert event.causes == ("a", "b")
        assert (event.correlation_id, event.model_name, event.model_version) == ("run", "m", "2")
        assert (event.model_signature, event.stream, event.expected_version) == (
            "sha256:ab",
            "st",
            3,
        )
        assert event.extensions == {"priority": 7, "urgent": True}

    def test_a_name_with_a_trailing_newline_is_refused(self) -> None:
        body = orjson.dumps(
            {"specversion": "1.0", "id": "x", "source": "/s", "type": "t", "position\n": "7"}
        )
        with pytest.raises(InvalidCloudEvent):
            parse_request("application/cloudevents+json", [], body, LIMITS)

    def test_the_quick_check_builds_what_the_full_check_builds(self) -> None:
        # String-only attributes take a shortcut; an integer extension takes the full
        # check. Apart from that extension, the two events must be the same.
        common = {
            "subject": "sub",
            "time": "2026-11-30T12:00:00.5Z",
            "datacontenttype": "application/json",
            "dataschema": "https://example.com/s",
            "causationid": "a,b,a",
            "correlationid": "run",
            "modelname": "m",
            "modelversion": "2",
            "modelsig": "sha256:ab",
            "stream": "st",
            "region": "eu",
        }
        [quick] = parse_request("application/cloudevents+json", [], structured(**common), LIMITS)
        [full] = parse_request(
            "application/cloudevents+json", [], structured(**common, priority=7), LIMITS
        )
        assert full.extensions.pop("priority") == 7
        assert quick == full
        assert (quick.subject, quick.time, quick.causes) == ("sub", common["time"], ("a", "b"))
        assert quick.time_value == datetime(2026, 11, 30, 12, 0, 0, 500_000, UTC)
        assert (quick.datacontenttype, quick.dataschema) == (
            "application/json",
            "https://example.com/s",
        )
        assert (quick.correlation_id, quick.model_name, quick.model_version) == ("run", "m", "2")
        assert (quick.model_signature, quick.stream, quick.extensions) == (
            "sha256:ab",
            "st",
            {"region": "eu"},
        )

    def test_null_members_are_unset(self) -> None:
        [event] = parse_request(
            "application/cloudevents+json", [], structured(subject=None), LIMITS
        )
        assert event.subject is None
        assert event.stream == "/s"

    def test_reserved_types_are_refused(self) -> None:
        with pytest.raises(ReservedType):
            parse_request("application/cloudevents+json", [], structured(type="causeway.x"), LIMITS)

    def test_the_attribute_limit_names_the_excess(self) -> None:
        with pytest.raises(EventTooLarge, match="over the 128-byte limit by"):
            parse_request(
                "application/cloudevents+json",
                [],
                structured(note="x" * 200),
                Limits(max_attributes_bytes=128),
            )

    @pytest.mark.parametrize(
        ("members", "attribute"),
        [
            ({"dataschema": ""}, "dataschema"),
            ({"dataschema": "not a uri"}, "dataschema"),
            ({"dataschema": "/relative/schema.json"}, "dataschema"),
            ({"datacontenttype": ""}, "datacontenttype"),
            ({"datacontenttype": "json"}, "datacontenttype"),
            ({"datacontenttype": "application/json extra"}, "datacontenttype"),
        ],
    )
    def test_dataschema_is_a_uri_and_datacontenttype_a_media_type(
        self, members: dict[str, str], attribute: str
    ) -> None:
        with pytest.raises(InvalidCloudEvent) as refused:
            parse_request("application/cloudevents+json", [], structured(**members), LIMITS)
        assert [e["attribute"] for e in refused.value.extensions["errors"]] == [attribute]

    @pytest.mark.parametrize(
        "members",
        [
            {"dataschema": "urn:example:schema:1"},
            {"datacontenttype": "text/plain; charset=utf-8"},
            {"datacontenttype": "application/vnd.acme.v2+json"},
        ],
    )
    def test_well_formed_schemas_and_media_types_pass(self, members: dict[str, str]) -> None:
        [event] = parse_request("application/cloudevents+json", [], structured(**members), LIMITS)
        assert (event.dataschema or event.datacontenttype) in members.values()

    @pytest.mark.parametrize("event_id", ["a,b", " a", "a\u00a0", "a\u3000"])
    def test_an_id_that_no_causationid_could_name_is_refused(self, event_id: str) -> None:
        # causationid splits on commas and strips each id: such an event could be stored
        # but never named as anything's cause.
        with pytest.raises(InvalidCloudEvent, match="no causationid could name it") as refused:
            parse_request("application/cloudevents+json", [], structured(id=event_id), LIMITS)
        assert [e["attribute"] for e in refused.value.extensions["errors"]] == ["id"]

    def test_integers_beyond_32_bits_are_refused(self) -> None:
        with pytest.raises(InvalidCloudEvent):
            parse_request("application/cloudevents+json", [], structured(big=2**31), LIMITS)


class TestTime:
    @pytest.mark.parametrize(
        "text",
        [
            "2026-11-30T12:00:00Z",
            "2026-11-30T12:00:00.123456789+00:00",
            "2026-11-30t12:00:00-05:30",
        ],
    )
    def test_rfc3339_forms_parse(self, text: str) -> None:
        value, why = parse_rfc3339(text)
        assert value is not None
        assert why is None

    @pytest.mark.parametrize(
        "text", ["2026-11-30", "2026-13-01T00:00:00Z", "2026-11-30T12:00:60Z", "2026-11-30T12:00Z"]
    )
    def test_other_forms_are_refused(self, text: str) -> None:
        assert parse_rfc3339(text)[0] is None

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("2026-11-30T12:00:00.1Z", datetime(2026, 11, 30, 12, 0, 0, 100_000, UTC)),
            ("2026-11-30t23:59:59.999999999z", datetime(2026, 11, 30, 23, 59, 59, 999_999, UTC)),
            (
                "2024-02-29T00:00:00.000001+14:00",
                datetime(2024, 2, 29, 0, 0, 0, 1, timezone(timedelta(hours=14))),
            ),
            ("1970-01-01T00:00:00-00:00", datetime(1970, 1, 1, tzinfo=UTC)),
            (
                "2026-11-30T12:00:00-23:59",
                datetime(2026, 11, 30, 12, 0, 0, 0, timezone(-timedelta(hours=23, minutes=59))),
            ),
        ],
    )
    def test_the_instant_is_kept_to_the_microsecond(self, text: str, expected: datetime) -> None:
        value, _ = parse_rfc3339(text)
        assert value is not None
        assert (value, value.utcoffset()) == (expected, expected.utcoffset())

    def test_a_fraction_of_any_length_is_cut_to_microseconds(self) -> None:
        value, why = parse_rfc3339("2026-11-30T12:00:00.1234567891234Z")
        assert (value, why) == (datetime(2026, 11, 30, 12, 0, 0, 123456, UTC), None)

    @pytest.mark.parametrize(
        "text", ["\uff12\uff10\uff12\uff16-01-01T00:00:00Z", "2026-01-01T00:00:0\u0663Z"]
    )
    def test_digits_of_other_scripts_are_refused(self, text: str) -> None:
        value, why = parse_rfc3339(text)
        assert value is None
        assert why is not None
        assert "not an RFC 3339" in why

    @pytest.mark.parametrize(
        "text", ["2016-12-31T23:59:60Z", "2016-12-31T23:59:60.5Z", "2016-12-31T18:59:60-05:00"]
    )
    def test_a_leap_second_is_the_last_instant_before_the_next_minute(self, text: str) -> None:
        """RFC 3339 allows second 60 (a leap second), at the end of a UTC day."""
        value, why = parse_rfc3339(text)
        assert why is None
        assert value == datetime(2016, 12, 31, 23, 59, 59, 999_999, UTC)

    @pytest.mark.parametrize(
        ("text", "why"),
        [
            ("2026-11-30T12:00:60Z", "only the last minute of a UTC day"),
            ("2016-12-31T23:59:60+01:00", "only the last minute of a UTC day"),
            ("2026-02-30T00:00:00Z", "not a valid date"),
            ("2026-11-30T12:00:00.Z", "not an RFC 3339"),
            ("2026-11-30T12:00:00Z\n", "not an RFC 3339"),
            ("2024-01-01T00:00:00+24:00", "not an RFC 3339"),
            ("2024-01-01T00:00:00-05:60", "not an RFC 3339"),
            ("0001-01-01T00:00:00+01:00", "outside the years"),
            ("9999-12-31T23:00:00-01:30", "outside the years"),
        ],
    )
    def test_a_refusal_says_why(self, text: str, why: str) -> None:
        value, reason = parse_rfc3339(text)
        assert value is None
        assert reason is not None
        assert why in reason


def test_json_media_types() -> None:
    assert is_json_media_type("application/json; charset=utf-8")
    assert is_json_media_type("application/vnd.acme+json")
    assert is_json_media_type(None)
    assert not is_json_media_type("text/plain")


class TestNumbers:
    def test_integral_numbers_are_stored_as_integers(self) -> None:
        body = structured(data={"a": 1.0, "b": -0.0, "c": [2.5, 3]})
        [event] = parse_request("application/cloudevents+json", [], body, LIMITS)
        assert event.data == {"a": 1, "b": 0, "c": [2.5, 3]}
        assert isinstance(event.data["a"], int)

    @pytest.mark.parametrize("number", ["1e300", "9007199254740992", "-1e16"])
    def test_numbers_beyond_the_ijson_range_are_refused(self, number: str) -> None:
        body = (
            b'{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{"n":'
            + number.encode()
            + b"}}"
        )
        with pytest.raises(InvalidEvent, match="I-JSON"):
            parse_request("application/cloudevents+json", [], body, LIMITS)


class TestDepth:
    """Data nests at most MAX_DATA_DEPTH levels, in every mode: deeper, the hash chain's
    encoding and the answers that carry data could not write it."""

    @staticmethod
    def nested(levels: int, leaf: object = 1) -> object:
        value = leaf
        for level in range(levels):
            value = [value] if level % 2 else {"k": value}
        return value

    def test_the_deepest_data_allowed_is_stored(self) -> None:
        data = self.nested(MAX_DATA_DEPTH)
        [event] = parse_request("application/cloudevents+json", [], structured(data=data), LIMITS)
        assert event.data == data

    @pytest.mark.parametrize("levels", [MAX_DATA_DEPTH + 1, 300, 1000])
    @pytest.mark.parametrize("leaf", [b"1", b"1.0", b'"\\u0000"'])  # each had its own crash
    def test_deeper_data_is_refused_in_structured_mode(self, levels: int, leaf: bytes) -> None:
        data = b"[" * levels + leaf + b"]" * levels  # past what orjson.dumps could write
        body = structured(data="@").replace(b'"@"', data)
        with pytest.raises(InvalidEvent, match=f"more than {MAX_DATA_DEPTH} levels"):
            parse_request("application/cloudevents+json", [], body, LIMITS)

    def test_deeper_data_is_refused_in_binary_mode(self) -> None:
        headers = [(b"ce-specversion", b"1.0"), (b"ce-id", b"1"), (b"ce-source", b"/s"),
                   (b"ce-type", b"t")]  # fmt: skip
        body = b"[" * 300 + b"1" + b"]" * 300
        with pytest.raises(InvalidEvent, match="levels deep"):
            parse_request("application/json", headers, body, LIMITS)

    def test_a_batch_names_the_deep_event(self) -> None:
        body = orjson.dumps([BASE, {**BASE, "id": "2", "data": self.nested(MAX_DATA_DEPTH + 1)}])
        with pytest.raises(InvalidEvent) as refused:
            parse_request(BATCH, [], body, LIMITS)
        assert refused.value.extensions["errors"][0]["index"] == 1

    def test_many_brackets_side_by_side_are_not_depth(self) -> None:
        data = [[{"a": [1]}] for _ in range(MAX_DATA_DEPTH)]
        [event] = parse_request("application/cloudevents+json", [], structured(data=data), LIMITS)
        assert event.data == data


def test_system_ids_are_reserved() -> None:
    with pytest.raises(ReservedType, match="ids starting with 'causeway:'"):
        parse_request(
            "application/cloudevents+json", [], structured(id="causeway:model:m:1"), LIMITS
        )


@pytest.mark.parametrize(
    ("members", "attribute"),
    [
        ({"stream": "causeway:deployment:x"}, "stream"),
        ({"subject": "causeway:model:m"}, "subject"),  # the stream, when none is named
        ({"source": "causeway:x"}, "source"),
    ],
)
def test_system_streams_are_reserved(members: dict[str, str], attribute: str) -> None:
    with pytest.raises(ReservedType, match="streams starting with 'causeway:'") as refused:
        parse_request("application/cloudevents+json", [], structured(**members), LIMITS)
    assert [e["attribute"] for e in refused.value.extensions["errors"]] == [attribute]


@pytest.mark.parametrize(
    ("attributes", "detail"),
    [
        ({"modelversion": "77"}, "modelversion without modelname: "),
        ({"modelname": "m"}, "modelname without modelversion: "),
        ({"modelsig": "sha256:ab"}, "modelsig without modelname and modelversion: "),
        (
            {"modelname": "m", "modelsig": "sha256:ab"},
            "modelname and modelsig without modelversion",
        ),
    ],
)
def test_a_model_named_in_part_is_refused(attributes: dict[str, str], detail: str) -> None:
    """Half of the pair was stored unchecked, and GraphQL read it as no model at all."""
    with pytest.raises(InvalidCloudEvent, match=detail):
        parse_request("application/cloudevents+json", [], structured(**attributes), LIMITS)
