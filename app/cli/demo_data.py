"""The data set ``causeway demo`` loads (docs/demo.md describes it): a hospital's chest CT
workflow, as plain JSON bodies of the public HTTP API.

Every event has a fixed id and fixed content (times included), so loading the set again
re-sends exactly what is stored and the store adds nothing. Three studies run through the
same diamond: the order causes the acquisition, which causes both the nodule detector's
findings and the quality check; the triage decision is caused by both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MODEL = "nodule-detector"
SERVICE = "nodule-detection"
STABLE, CANARY = "2.3.0", "2.4.0"
QUEUE = "demo-reporting"
ROUTE = "demo-draft-reports"
SENSOR = "demo-ward-cam"  # the event camera in the ward corridor (the bundled recording)

_INPUTS = [
    {
        "name": "ct_volume",
        "type": "tensor",
        "tensor-spec": {"dtype": "float32", "shape": [-1, -1, 512, 512]},
    },
    {"name": "slice_thickness_mm", "type": "double"},
]
_OUTPUTS = [
    {"name": "nodules", "type": "string"},
    {"name": "max_malignancy", "type": "double"},
]


def model_versions() -> list[dict[str, Any]]:
    """The detector's two versions (``POST /models/nodule-detector/versions``): 2.4.0
    takes the same inputs and adds an output, so a canary of it is allowed."""
    return [
        {
            "version": STABLE,
            "signature": {"inputs": _INPUTS, "outputs": _OUTPUTS},
            "tags": {"trained_on": "lidc-2024", "owner": "radiology-ai"},
            "enforce_outputs": True,
        },
        {
            "version": CANARY,
            "signature": {
                "inputs": _INPUTS,
                "outputs": [*_OUTPUTS, {"name": "nodule_count", "type": "long"}],
            },
            "tags": {"trained_on": "lidc-2024+site-2026", "owner": "radiology-ai"},
            "enforce_outputs": True,
        },
    ]


# (path under /deployments/nodule-detection, body): 2.3.0 goes live and is promoted, 2.4.0 takes 10 % as
# a canary, then 25 %, and is rolled back. The studies are posted between the canary's
# start and its rollback (``STUDIES_AFTER`` steps).
DEPLOYMENT_STEPS: list[tuple[str, dict[str, Any]]] = [
    ("rollouts", {"model": MODEL, "version": STABLE, "reason": "first deployment"}),
    ("promote", {"reason": "validated on the pilot studies"}),
    (
        "rollouts",
        {
            "model": MODEL,
            "version": CANARY,
            "percent": 10,
            "strategy": "canary",
            "reason": "canary: retrained with this site's 2026 scans",
        },
    ),
    ("traffic", {"percent": 25, "reason": "no alarms after the first studies"}),
    (
        "rollback",
        {"reason": "2.4.0 flags more nodules under 4 mm than 2.3.0 on low-dose scans"},
    ),
]
STUDIES_AFTER = 3


@dataclass(frozen=True, slots=True)
class Study:
    accession: str
    hour: str  # the hour of the day the study runs, "08"
    model_version: str
    nodules: list[dict[str, Any]]
    motion_artefact: bool
    urgent: bool


STUDIES = [
    Study("1001", "08", STABLE, [{"lobe": "RUL", "diameter_mm": 14.2, "score": 0.91}], False, True),
    Study("1002", "09", CANARY, [{"lobe": "LLL", "diameter_mm": 3.6, "score": 0.22}], False, False),
    Study("1003", "10", STABLE, [], True, False),
]


def study_events(study: Study) -> list[dict[str, Any]]:
    """One study's five events, as one batch: order → acquisition → (findings, quality
    check) → triage decision."""
    a, day = study.accession, f"2026-11-30T{study.hour}"
    run = f"demo-study-{a}"
    ids = {step: f"demo-{step}-{a}" for step in ("order", "scan", "findings", "qa", "triage")}
    max_score = max((n["score"] for n in study.nodules), default=0.0)
    findings_data: dict[str, Any] = {
        "nodules": ", ".join(f"{n['lobe']} {n['diameter_mm']} mm" for n in study.nodules) or "none",
        "max_malignancy": max_score,
    }
    if study.model_version == CANARY:
        findings_data["nodule_count"] = len(study.nodules)
    decision = "urgent" if study.urgent else "routine"
    return [
        _event(
            ids["order"],
            "/demo/ris",
            "org.example.radiology.order.placed.v1",
            f"{day}:00:00Z",
            run,
            [],
            {
                "accession": a,
                "modality": "CT",
                "body_part": "chest",
                "indication": "lung nodule follow-up",
                "patient": f"P-{a}",
            },
        ),
        _event(
            ids["scan"],
            "/demo/modalities/ct-2",
            "org.example.radiology.study.acquired.v1",
            f"{day}:12:30Z",
            run,
            [ids["order"]],
            {
                "accession": a,
                "series": 3,
                "images": 412,
                "slice_thickness_mm": 1.0,
                "ctdi_vol_mgy": 2.1,
            },
        ),
        {
            **_event(
                ids["findings"],
                f"/demo/models/{MODEL}",
                "org.example.radiology.nodules.detected.v1",
                f"{day}:13:05Z",
                run,
                [ids["scan"]],
                findings_data,
            ),
            "modelname": MODEL,
            "modelversion": study.model_version,
        },
        _event(
            ids["qa"],
            "/demo/qa",
            "org.example.radiology.quality.checked.v1",
            f"{day}:13:10Z",
            run,
            [ids["scan"]],
            {
                "motion_artefact": study.motion_artefact,
                "dose_within_reference": True,
                "coverage": "complete",
            },
        ),
        {
            **_event(
                ids["triage"],
                "/demo/triage",
                "org.example.radiology.triage.decided.v1",
                f"{day}:13:11Z",
                run,
                [ids["findings"], ids["qa"]],
                {
                    "worklist": decision,
                    "reason": f"largest nodule scored {max_score:.2f}"
                    + ("; motion artefact" if study.motion_artefact else ""),
                },
            ),
            "priority": 9 if study.urgent else 5,
        },
    ]


def _event(
    event_id: str, source: str, kind: str, time: str, run: str, causes: list[str], data: Any
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "specversion": "1.0",
        "id": event_id,
        "source": source,
        "type": kind,
        "subject": run.removeprefix("demo-"),
        "time": time,
        "correlationid": run,
        "data": data,
    }
    if causes:
        event["causationid"] = ",".join(causes)
    return event


# The route that turns each triage decision into a "draft the report" task.
ROUTE_SPEC: dict[str, Any] = {
    "id": ROUTE,
    "types": ["org.example.radiology.triage.decided.v1"],
    "kind": "draft-report",
    "queue": QUEUE,
    "max_retries": 1,
    "backoff_base_s": 0.2,
}

# What the demo's worker does with each study's task, attempt by attempt: 1001's report
# is drafted; 1002's first attempt times out and the retry drafts it; 1003's series has a
# motion artefact, so both attempts fail as data_invalid and the task is dead-lettered
# (archived with its input).
WORKER_PLAN: dict[str, list[tuple[str, str]]] = {
    "demo-triage-1001": [("complete", "")],
    "demo-triage-1002": [("transient", "report service timed out after 30 s"), ("complete", "")],
    "demo-triage-1003": [
        ("data_invalid", "series 3 has a motion artefact: no report can be drafted from it"),
        ("data_invalid", "series 3 still has a motion artefact: rescan needed"),
    ],
}


def draft_report(trigger: dict[str, Any]) -> dict[str, Any]:
    """The result a completed task appends (the store adds the trigger to its causes)."""
    accession = str(trigger["id"]).rsplit("-", 1)[-1]
    return {
        "specversion": "1.0",
        "id": f"demo-report-{accession}",
        "source": "/demo/workers/report-drafter",
        "type": "org.example.radiology.report.drafted.v1",
        "correlationid": f"demo-study-{accession}",
        "data": {"accession": accession, "status": "awaiting radiologist sign-off"},
    }
