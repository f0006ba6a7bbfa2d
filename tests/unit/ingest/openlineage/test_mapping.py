"""What the mapping reads of a valid event: here, the parent facet, whose body the spec's
schema does not check."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from ingest.openlineage.mapping import correlation, parse
from ingest.openlineage.schema import validate

RUN_ID = "0190a3e2-5b8c-7d4e-9f00-0123456789ab"
PARENT = "0190a3e2-5b8c-7d4e-9f00-00000000000a"
ROOT = "0190a3e2-5b8c-7d4e-9f00-00000000000b"
JOB = {"namespace": "n", "name": "p"}


def with_parent(**members: Any) -> dict[str, Any]:
    facet = {"_producer": "https://p", "_schemaURL": "https://s", **members}
    return {
        "eventType": "START",
        "eventTime": "2026-11-02T10:00:00Z",
        "producer": "https://example.com/producer",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": RUN_ID, "facets": {"parent": facet}},
        "job": {"namespace": "n", "name": "j"},
    }


@pytest.mark.parametrize(
    ("facet", "parent", "root"),
    [
        ({"run": {"runId": PARENT}, "job": JOB}, PARENT, None),
        ({"run": {"runId": PARENT}, "job": JOB, "root": {"run": {"runId": ROOT}}}, PARENT, ROOT),
        ({"run": "not-an-object", "job": JOB}, None, None),
        ({"run": {"runId": 7}, "job": JOB}, None, None),
        ({"run": {"runId": ""}, "job": JOB}, None, None),
        ({"run": {"runId": PARENT}, "root": "not-an-object"}, PARENT, None),
        ({"run": {"runId": PARENT}, "root": {"run": 5}}, PARENT, None),
        ({"run": None, "root": {"run": {"runId": ROOT}}}, None, ROOT),
        ({}, None, None),
    ],
    ids=[
        "parent",
        "root",
        "run-is-a-string",
        "run-id-is-a-number",
        "run-id-is-empty",
        "root-is-a-string",
        "root-run-is-a-number",
        "root-without-parent",
        "empty",
    ],
)
def test_a_parent_facet_of_another_shape_names_no_run(
    facet: dict[str, Any], parent: str | None, root: str | None
) -> None:
    event = with_parent(**facet)
    parsed = parse(validate(event), event, orjson.dumps(event))
    assert (parsed.parent_run_id, parsed.root_run_id) == (parent, root)
    assert correlation(parsed) == (root or parent or RUN_ID)
    assert parsed.streams_to_look_up()[1:] == (
        [] if parent is None else [f"openlineage:run:{parent}"]
    )
