"""What is refused of an event the spec's schema took: names too long to keep as
attributes, an eventTime too far ahead, values the log cannot hold."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from app.errors import EventTooLarge, InvalidOpenLineageEvent, TimeInFuture
from ingest.limits import Limits
from ingest.openlineage.mapping import Parsed, parse
from ingest.openlineage.schema import validate
from ingest.openlineage.storable import check_storable, check_value

RUN_ID = "0190a3e2-5b8c-7d4e-9f00-0123456789ab"
PRODUCER = "https://example.com/producer"
NOW = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
LIMITS = Limits(max_attributes_bytes=128)


def parsed(**members: Any) -> Parsed:
    event: dict[str, Any] = {
        "eventType": "START",
        "eventTime": "2026-11-02T10:00:00Z",
        "producer": PRODUCER,
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": RUN_ID},
        "job": {"namespace": "n", "name": "j"},
    }
    event.update(members)
    event = {k: v for k, v in event.items() if v is not ...}
    return parse(validate(event), event, orjson.dumps(event))


def refusal(event: Parsed, limits: Limits = LIMITS) -> dict[str, Any]:
    with pytest.raises(EventTooLarge) as refused:
        check_storable(event, limits, NOW)
    error: dict[str, Any] = refused.value.extensions["errors"][0]
    return error


def parent(run_id: str, root: str | None = None) -> dict[str, Any]:
    facet: dict[str, Any] = {
        "_producer": PRODUCER,
        "_schemaURL": "https://openlineage.io/spec/facets/1-1-0/ParentRunFacet.json",
        "run": {"runId": run_id},
        "job": {"namespace": "n", "name": "p"},
    }
    if root is not None:
        facet["root"] = {"run": {"runId": root}, "job": {"namespace": "n", "name": "r"}}
    return {"runId": RUN_ID, "facets": {"parent": facet}}


class TestNames:
    @pytest.mark.parametrize(
        ("event", "where"),
        [
            (parsed(producer="https://p/" + "x" * 200), "#/producer"),
            (parsed(job={"namespace": "n", "name": "x" * 129}), "#/job/name"),
            (parsed(inputs=[{"namespace": "n", "name": "x" * 120}]), "#/inputs/0/name"),
            (parsed(outputs=[{"namespace": "x" * 120, "name": "t"}]), "#/outputs/0/namespace"),
            (parsed(run=parent("x" * 129)), "#/run/facets/parent/run/runId"),
            (parsed(run=parent(RUN_ID, root="x" * 129)), "#/run/facets/parent/root/run/runId"),
            (
                parsed(
                    run=..., job=..., eventType=..., dataset={"namespace": "n", "name": "x" * 120}
                ),
                "#/dataset/name",
            ),
            (
                parsed(run=..., eventType=..., job={"namespace": "x" * 120, "name": "j"}),
                "#/job/namespace",
            ),
        ],
        ids=[
            "producer",
            "run-event-job-name",
            "input",
            "output",
            "parent-run",
            "root-run",
            "dataset-event",
            "job-event",
        ],
    )
    def test_a_name_past_the_attribute_limit_is_refused_by_its_pointer(
        self, event: Parsed, where: str
    ) -> None:
        error = refusal(event)
        assert error["pointer"] == where
        assert "over the 128-byte limit" in error["detail"]

    def test_a_stream_is_measured_as_stored_escaped_and_in_utf8(self) -> None:
        prefix = len("openlineage:dataset:n:")
        fits = parsed(inputs=[{"namespace": "n", "name": "x" * (128 - prefix)}])
        check_storable(fits, LIMITS, NOW)
        # ':' is stored as '%3A', 'é' takes two bytes: a name of the same length is over
        rest = "x" * (127 - prefix)
        for name, size in ((":" + rest, 130), ("é" + rest, 129)):
            over = refusal(parsed(inputs=[{"namespace": "n", "name": name}]))
            assert over["pointer"] == "#/inputs/0/name"
            assert f"would take {size} bytes" in over["detail"]

    def test_the_limit_is_the_attributes_limit_of_post_events(self) -> None:
        event = parsed(producer="https://p/" + "x" * 1100)
        check_storable(event, Limits(max_attributes_bytes=2048), NOW)
        assert refusal(event, Limits(max_attributes_bytes=1024))["pointer"] == "#/producer"


class TestTime:
    def test_an_event_time_past_max_future_s_is_refused(self) -> None:
        limits = Limits(max_future_s=60)
        check_storable(parsed(eventTime="2026-11-02T10:01:00Z"), limits, NOW)
        with pytest.raises(TimeInFuture) as refused:
            check_storable(parsed(eventTime="2026-11-02T10:01:00.001Z"), limits, NOW)
        assert refused.value.extensions["errors"][0]["pointer"] == "#/eventTime"
        assert refused.value.detail == (
            "eventTime 2026-11-02T10:01:00.001Z is 60.001 s ahead of the server's clock "
            "(2026-11-02T10:00:00Z); at most 60 s is taken (CAUSEWAY_MAX_FUTURE_S)"
        )

    def test_any_time_is_taken_when_max_future_s_is_unset(self) -> None:
        check_storable(parsed(eventTime="2999-01-01T00:00:00Z"), Limits(), NOW)


def test_a_value_the_log_cannot_hold_is_refused() -> None:
    with pytest.raises(InvalidOpenLineageEvent) as refused:
        check_value(parsed(job={"namespace": "n", "name": "nul\u0000"}).event)
    assert refused.value.extensions["errors"] == [
        {"pointer": "#", "detail": "it holds the character U+0000, which cannot be stored"}
    ]
