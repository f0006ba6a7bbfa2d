"""``causeway demo`` against a real ``causeway serve``: what docs/demo.md promises is in the
store, and a second run adds nothing."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx2
import orjson
from sqlalchemy import URL

from tests.integration.process import create_key, environment, serving

# docs/demo.md, "Counts by type"
EXPECTED = {
    "org.example.radiology.order.placed.v1": 3,
    "org.example.radiology.study.acquired.v1": 3,
    "org.example.radiology.nodules.detected.v1": 3,
    "org.example.radiology.quality.checked.v1": 3,
    "org.example.radiology.triage.decided.v1": 3,
    "org.example.radiology.report.drafted.v1": 2,
    "causeway.model.registered": 2,
    "causeway.deployment.rollout_started": 2,
    "causeway.deployment.promoted": 1,
    "causeway.deployment.traffic_shifted": 1,
    "causeway.deployment.rolled_back": 1,
    "causeway.route.defined": 1,
    "causeway.task.created": 3,
    "causeway.task.leased": 5,
    "causeway.task.retried": 2,
    "causeway.task.completed": 2,
    "causeway.task.dead_lettered": 1,
    "evs.segment.recorded": 13,
    "evs.activity.detected": 1,
}
AUDIT = (
    '{ audit(decisionId: "demo-triage-1001") { sourceEvents { id } '
    "models { name version } chainVerified } }"
)


def _demo(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "demo", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _counts(http: httpx2.Client) -> Counter[str]:
    lines = http.get("/replay").text.splitlines()
    # The autoscale advisor writes on its own clock; nothing else moves the log.
    kinds = (orjson.loads(line)["type"] for line in lines)
    return Counter(kind for kind in kinds if not kind.startswith("causeway.queue."))


def test_the_demo_loads_what_it_documents_once(database_url: URL, tmp_path: Path) -> None:
    env = environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
        CAUSEWAY_SCHEDULER_AUTOSCALE_INTERVAL_S="3600",
    )
    key = create_key(env, "default", "admin")
    (tmp_path / "admin.key").write_text(key + "\n")  # where `make run` leaves it
    with serving(env) as base:
        assert (tmp_path / "address").read_text().strip() == base
        first = _demo(env)  # no arguments: the address and the key serve left
        assert first.returncode == 0, first.stderr
        assert "added 52 events" in first.stdout
        with httpx2.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as http:
            counts = _counts(http)
            assert counts == Counter(EXPECTED)
            [letter] = http.get("/dead-letters", params={"queue": "demo-reporting"}).json()[
                "dead_letters"
            ]
            assert (letter["trigger"], letter["disposition"]) == ("demo-triage-1003", "archived")
            deployment = http.get("/deployments/nodule-detection").json()
            assert deployment["status"] == "stable"
            assert deployment["stable_version"] == "2.3.0"
            assert deployment["history"][-1]["action"] == "rolled_back"
            audit = http.post("/graphql", json={"query": AUDIT}).json()["data"]["audit"]
            assert audit == {
                "sourceEvents": [{"id": "demo-order-1001"}],
                "models": [{"name": "nodule-detector", "version": "2.3.0"}],
                "chainVerified": True,
            }

            again = _demo(env, "--target", base, "--key", key)
            assert again.returncode == 0, again.stderr
            assert "added nothing" in again.stdout
            assert _counts(http) == counts


def _env(database_url: URL, tmp_path: Path) -> dict[str, str]:
    return environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
        CAUSEWAY_SCHEDULER_AUTOSCALE_INTERVAL_S="3600",
    )


def test_demo_with_a_wrong_key_is_one_line_not_a_traceback(
    database_url: URL, tmp_path: Path
) -> None:
    """A mistyped or revoked --key is bad input: one line, exit 2 (it was Typer's
    traceback panel and exit 1)."""
    env = _env(database_url, tmp_path)
    with serving(env) as base:
        result = _demo(env, "--target", base, "--key", "cw_000000000000_wrong")
    assert "Traceback" not in result.stderr, result.stderr
    assert "╭" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ")
    assert result.stderr.count("\n") == 1, result.stderr


def test_demo_with_a_file_that_is_no_recording_is_one_line_not_a_traceback(
    database_url: URL, tmp_path: Path
) -> None:
    """``--recording`` naming a file the bridge cannot read (the wrong file, a damaged
    .db3): one line, exit 2 (it was a traceback, ``UnknownFormat`` or ``UnsupportedBag``)."""
    env = _env(database_url, tmp_path)
    key = create_key(env, "default", "admin")
    not_a_recording = tmp_path / "notes.txt"
    not_a_recording.write_text("not a recording\n")
    with serving(env) as base:
        result = _demo(env, "--target", base, "--key", key, "--recording", str(not_a_recording))
    assert "Traceback" not in result.stderr, result.stderr
    assert "╭" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ")
    assert result.stderr.count("\n") == 1, result.stderr
