"""The refusal of an OpenLineage event with many errors names its first, and the same one
in every process."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = r"""
import uuid
from app.errors import InvalidOpenLineageEvent
from ingest.openlineage.schema import validate
event = {
    "eventTime": "2024-01-01T00:00:00Z", "producer": "https://example.com/p",
    "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
    "eventType": "START", "job": {"namespace": "n", "name": "j"},
    "run": {"runId": str(uuid.uuid4()),
            "facets": {f"f{i:04d}": {} for i in range(200)}},  # each lacks _producer
}
try:
    validate(event)
    print("valid")
except InvalidOpenLineageEvent as refused:
    print(refused.extensions["errors"][0]["pointer"])
"""


def refusal_pointer(hash_seed: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True, text=True, check=True, timeout=60,
        env={**os.environ, "PYTHONHASHSEED": hash_seed},
    )  # fmt: skip
    return done.stdout.strip()


def test_an_event_with_many_bad_facets_names_its_first_and_the_same_each_time() -> None:
    """docs/openlineage.md: errors[0].pointer is the JSON Pointer of the first error. 200
    facets, each lacking _producer: jsonschema walks a facet map in set order (string
    hashes, seeded per process), and with the first 64 errors read, the pointer named
    another facet, a different one in each server process for the same body."""
    pointers = [refusal_pointer(seed) for seed in ("0", "1", "2")]
    assert pointers == ["#/run/facets/f0000"] * 3
