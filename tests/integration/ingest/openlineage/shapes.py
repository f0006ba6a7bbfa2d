"""OpenLineage events shaped like those the Airflow and Spark integrations send, as JSON."""

from __future__ import annotations

import uuid
from typing import Any

SPEC = "https://openlineage.io/spec/2-0-2/OpenLineage.json"
AIRFLOW = "https://github.com/apache/airflow/tree/providers-openlineage/2.2.0"
SPARK = "https://github.com/OpenLineage/OpenLineage/tree/1.30.0/integration/spark"
FACET = "https://openlineage.io/spec/facets/1-0-0/"


def facet(name: str, **members: Any) -> dict[str, Any]:
    return {"_producer": AIRFLOW, "_schemaURL": f"{FACET}{name}.json", **members}


def schema(*columns: str) -> dict[str, Any]:
    return facet("SchemaDatasetFacet", fields=[{"name": c, "type": "STRING"} for c in columns])


def dataset(namespace: str, name: str, **facets: Any) -> dict[str, Any]:
    return {"namespace": namespace, "name": name, "facets": facets}


def run_event(
    state: str,
    run_id: str,
    job: str,
    *,
    namespace: str = "airflow",
    inputs: list[dict[str, Any]] | None = None,
    outputs: list[dict[str, Any]] | None = None,
    parent: tuple[str, str] | None = None,
    time: str = "2026-11-02T10:00:00.000Z",
    producer: str = AIRFLOW,
    **run_facets: Any,
) -> dict[str, Any]:
    facets = dict(run_facets)
    if parent is not None:
        facets["parent"] = facet(
            "ParentRunFacet",
            run={"runId": parent[0]},
            job={"namespace": namespace, "name": parent[1]},
        )
    return {
        "eventType": state,
        "eventTime": time,
        "producer": producer,
        "schemaURL": f"{SPEC}#/$defs/RunEvent",
        "run": {"runId": run_id, "facets": facets},
        "job": {"namespace": namespace, "name": job, "facets": {}},
        "inputs": inputs or [],
        "outputs": outputs or [],
    }


def new_run() -> str:
    return str(uuid.uuid4())
