"""``causeway serve --workers 2``: one scrape of either worker shows both workers' counts
(prometheus-client's multiprocess mode, set up by ``serve``)."""

from __future__ import annotations

from pathlib import Path

import httpx2
import orjson
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import URL

from tests.integration.events import STRUCTURED, event
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
