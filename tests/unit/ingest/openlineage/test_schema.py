"""The spec's schema as shipped, and what validation against it tells a client."""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

import pytest

from app.errors import InvalidOpenLineageEvent
from ingest.openlineage.mapping import event_id
from ingest.openlineage.schema import Kind, pointer, validate

# The published spec/OpenLineage.json (2-0-2) at OpenLineage@8f02abfb7a: see spec/README.md
PUBLISHED_SHA256 = "69f68bee00b9beac88a87059c0102410e7bb05f3f43c46d02a0409831eceb0d2"
RUN_ID = "0190a3e2-5b8c-7d4e-9f00-0123456789ab"


def run_event(**members: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "eventType": "START",
        "eventTime": "2026-11-02T10:00:00Z",
        "producer": "https://example.com/producer",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": RUN_ID},
        "job": {"namespace": "n", "name": "j"},
    }
    event.update(members)
    return {k: v for k, v in event.items() if v is not ...}


def test_the_schema_is_the_published_file_unchanged() -> None:
    shipped = resources.files("ingest.openlineage").joinpath("spec/OpenLineage.json")
    assert hashlib.sha256(shipped.read_bytes()).hexdigest() == PUBLISHED_SHA256


class TestValidate:
    def test_each_kind_of_event(self) -> None:
        assert validate(run_event()) is Kind.RUN
        assert validate(run_event(eventType=...)) is Kind.RUN  # eventType is optional
        static = {k: v for k, v in run_event().items() if k not in ("run", "job", "eventType")}
        assert validate({**static, "dataset": {"namespace": "n", "name": "d"}}) is Kind.DATASET
        assert validate({**static, "job": {"namespace": "n", "name": "j"}}) is Kind.JOB

    @pytest.mark.parametrize(
        ("event", "where"),
        [
            (run_event(run={"runId": "42"}), "#/run/runId"),
            (run_event(eventTime="yesterday"), "#/eventTime"),
            (run_event(eventType="DONE"), "#/eventType"),
            (run_event(inputs=[{"namespace": "n"}]), "#/inputs/0"),
            (run_event(producer=...), "#"),
            ({"hello": "world"}, "#"),
            ([], "#"),
        ],
    )
    def test_the_first_error_is_named_by_its_pointer(self, event: Any, where: str) -> None:
        with pytest.raises(InvalidOpenLineageEvent) as refused:
            validate(event)
        assert refused.value.extensions["errors"][0]["pointer"] == where

    def test_a_facet_without_producer_is_refused(self) -> None:
        event = run_event(run={"runId": RUN_ID, "facets": {"nominalTime": {"x": 1}}})
        with pytest.raises(InvalidOpenLineageEvent):
            validate(event)

    @pytest.mark.parametrize(
        ("event", "where", "detail"),
        [
            (
                run_event(run={"runId": RUN_ID, "facets": {"custom": {"_producer": "https://p"}}}),
                "#/run/facets/custom",
                "'_schemaURL' is a required property",
            ),
            (
                run_event(
                    inputs=[{"namespace": "n", "name": "t", "facets": {"b": {"_schemaURL": "s"}}}]
                ),
                "#/inputs/0/facets/b",
                "'_producer' is a required property",
            ),
            (
                run_event(job={"namespace": "n", "name": "j", "facets": {"sql": 5}}),
                "#/job/facets/sql",
                "5 is not of type 'object'",
            ),
            (
                run_event(run={"runId": RUN_ID, "facets": "x"}),
                "#/run/facets",
                "'x' is not of type 'object'",
            ),
        ],
        ids=["run-facet", "dataset-facet", "job-facet", "facets-not-an-object"],
    )
    def test_a_facet_error_is_pointed_at_the_facet(
        self, event: Any, where: str, detail: str
    ) -> None:
        with pytest.raises(InvalidOpenLineageEvent) as refused:
            validate(event)
        assert refused.value.extensions["errors"] == [{"pointer": where, "detail": detail}]

    def test_items_are_in_document_order(self) -> None:
        inputs = [{"namespace": "n", "name": "t"}] * 12
        inputs[2], inputs[10] = {"namespace": "n"}, {"name": "t"}
        with pytest.raises(InvalidOpenLineageEvent) as refused:
            validate(run_event(inputs=inputs))
        assert refused.value.extensions["errors"][0]["pointer"] == "#/inputs/2"  # not 10


def test_pointers_escape_as_rfc_6901_says() -> None:
    assert pointer(["facets", "a/b", "c~d", 0]) == "#/facets/a~1b/c~0d/0"


def test_the_id_does_not_depend_on_key_order_or_spacing() -> None:
    event = run_event()
    assert event_id(dict(reversed(event.items()))) == event_id(event)
    assert event_id(run_event(eventType="COMPLETE")) != event_id(event)
