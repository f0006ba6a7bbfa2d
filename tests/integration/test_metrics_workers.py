"""``causeway serve --workers 2``: one scrape of either worker shows both workers' counts
(prometheus-client's multiprocess mode, set up by ``serve``), and the figures read for a
scrape (queue depths, lags) as they are now, for the scraping key's tenant only."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx2
import orjson
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import URL

from app.main import create_app, dispose
from app.settings import Settings
from tests.integration.conftest import catch_up
from tests.integration.events import JSON, STRUCTURED, event
from tests.integration.process import create_key, environment, serving


def appended(text: str, outcome: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "causeway_events_appended_total" and s.labels == {
                "tenant": "t",
                "outcome": outcome,
            }:
                return s.value
    return 0.0


def test_one_scrape_shows_every_workers_counts(database_url: URL, tmp_path: Path) -> None:
    env = environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
    )
    key = create_key(env, "t", "ingest,read")
    auth = {"Authorization": f"Bearer {key}"}
    with serving(env, "--workers", "2") as base:
        # A connection each: the two workers take turns accepting them.
        sent = [event() for _ in range(12)]
        for body in [*sent, sent[0]]:
            answer = httpx2.post(
                f"{base}/events", content=orjson.dumps(body), headers={**STRUCTURED, **auth}
            )
            assert answer.status_code in (200, 201)
        scrapes = [httpx2.get(f"{base}/metrics", headers=auth).text for _ in range(6)]
    for text in scrapes:
        assert (appended(text, "stored"), appended(text, "duplicate")) == (12, 1)


def drift_medians(text: str) -> list[float]:
    return [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "causeway_source_drift_median_seconds" and s.labels.get("source") == "/late"
    ]


# uvicorn raises the SIGTERM it caught again after its shutdown: the worker died of it,
# atexit never ran, and the leader's median stayed in every scrape (an alert for ever).
def test_a_worker_that_stops_leaves_no_gauges_behind(database_url: URL, tmp_path: Path) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
        CAUSEWAY_SHUTDOWN_TIMEOUT_S="5",
        TMPDIR=str(temporary),  # where serve makes the metrics folder
    )
    key = create_key(env, "t", "ingest,read")
    late = (datetime.now(UTC) - timedelta(seconds=10)).isoformat()
    with serving(env, "--workers", "2") as base:
        [folder] = temporary.glob("causeway-metrics-*")
        sent = httpx2.post(
            f"{base}/events",
            content=orjson.dumps(event(source="/late", time=late)),
            headers={**STRUCTURED, "Authorization": f"Bearer {key}"},
        )
        assert sent.status_code == 201, sent.text
        deadline = time.monotonic() + 30
        while not drift_medians(scrape(base, key)):
            assert time.monotonic() < deadline, "the drift projection never reported /late"
            time.sleep(0.3)
        [leading] = folder.glob("gauge_livemostrecent_*.db")
        leader = int(leading.stem.rsplit("_", 1)[1])
        supervisor = _parent_of(leader)
        os.kill(leader, signal.SIGTERM)  # as uvicorn's supervisor stops a worker
        deadline = time.monotonic() + 30
        while leading.exists():
            assert time.monotonic() < deadline, f"worker {leader}'s gauges stayed"
            time.sleep(0.2)
        assert not list(folder.glob(f"gauge_live*_{leader}.db"))
        assert not [m for _ in range(6) for m in drift_medians(scrape(base, key))]
        # Stopped while the supervisor replaces the worker, serve once waited past 30 s.
        while len(workers := _children_of(supervisor)) < 2 or leader in workers:
            assert time.monotonic() < deadline, f"worker {leader} was not replaced"
            time.sleep(0.2)
        scrape(base, key)  # the new worker is up


def _parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _children_of(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(stat[1]) == pid and stat[0] != "Z":
                    found.add(int(entry.name))
    return found


def scrape(base: str, key: str) -> str:
    # A connection each: the two workers take turns accepting them.
    answer = httpx2.get(f"{base}/metrics", headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200
    return answer.text


# The gauges made for a scrape were prometheus-client Gauges, which in multiprocess mode
# write to the process's file whatever registry they are in: every later scrape of
# either worker showed them again, with a pid label, to every tenant.
def test_a_tenants_scrape_never_shows_another_tenants_queues(
    database_url: URL, tmp_path: Path
) -> None:
    env = environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
    )
    theirs = create_key(env, "theirs", "ingest,read,admin")
    mine = create_key(env, "mine", "read")
    with serving(env, "--workers", "2") as base:
        route = {"id": "r", "types": ["job"], "kind": "k", "queue": "their-secret-queue"}
        made = httpx2.post(
            f"{base}/routes",
            content=orjson.dumps(route),
            headers={**JSON, "Authorization": f"Bearer {theirs}"},
        )
        assert made.status_code == 201, made.text
        deadline = time.monotonic() + 20  # the routes' read model follows the log
        while "their-secret-queue" not in scrape(base, theirs):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        for _ in range(8):  # their own scrapes, answered by either worker
            assert "their-secret-queue" in scrape(base, theirs)
        seen = [scrape(base, mine) for _ in range(8)]
    assert not [text for text in seen if "their-secret-queue" in text]
    assert not [
        s.labels
        for text in seen
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("causeway_queue_") and "pid" in s.labels
    ]


def test_projection_lag_is_read_now_once_per_projection(database_url: URL, tmp_path: Path) -> None:
    env = environment(
        CAUSEWAY_DATABASE_URL=database_url.render_as_string(hide_password=False),
        CAUSEWAY_DATA_DIR=str(tmp_path),
        CAUSEWAY_RUN_PROJECTIONS="false",  # projections run elsewhere (causeway project)
    )
    key = create_key(env, "t", "ingest,read")
    with serving(env, "--workers", "2") as base:
        for _ in range(3):
            sent = httpx2.post(
                f"{base}/events",
                content=orjson.dumps(event()),
                headers={**STRUCTURED, "Authorization": f"Bearer {key}"},
            )
            assert sent.status_code == 201
        for _ in range(8):
            scrape(base, key)  # both workers answer one while the projections lag
        asyncio.run(_catch_up(database_url))  # what `causeway project` does, elsewhere
        text = scrape(base, key)
    lags = [
        (s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "causeway_projection_lag_events"
    ]
    assert lags
    assert all(value == 0 for _, value in lags), lags
    assert len({labels["projection"] for labels, _ in lags}) == len(lags), lags
    assert text.count("# TYPE causeway_projection_lag_events gauge") == 1


async def _catch_up(database_url: URL) -> None:
    app = create_app(Settings(_env_file=None), database_url=database_url)
    try:
        await catch_up(app)
    finally:
        await dispose(app)
