"""The explorer's key, and pages that said less than, or other than, what holds: GraphiQL
kept the key (with each query of its history) in localStorage, past "Forget" and the tab;
the audit's truncation note named a cause (50 steps) where the server's node limit cut it;
a leap-second event time showed no drift; a model card's long id widened the audit page
past the screen. Each drives Debian's Chromium against a real ``causeway serve``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from playwright.sync_api import Browser, Page
from sqlalchemy import URL

from tests.integration.app.explorer.test_explorer import Served, explorer_service, open_page
from tests.integration.events import BATCH, JSON, dumps
from tests.integration.events import event as cloudevent


@pytest.fixture(scope="module")
def served(
    server: URL, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    with explorer_service(server, template_db, tmp_path_factory.mktemp("explorer-pages")) as s:
        yield s


def post(served: Served, batch: list[dict[str, Any]]) -> None:
    auth = {"Authorization": f"Bearer {served.keys['ingest,read,worker']}"}
    answer = httpx2.post(
        f"{served.base}/events", content=dumps(batch), headers={**BATCH, **auth}, timeout=30
    )
    assert answer.status_code == 201, answer.text


def visit(page: Page, served: Served, path: str) -> None:
    page.goto(f"{served.base}{path}")
    page.wait_for_selector("body[data-ready]")


def test_graphiql_leaves_no_copy_of_the_key_once_the_tab_forgets_it(
    browser: Browser, served: Served
) -> None:
    """docs/explorer.md: the key is kept in the tab's sessionStorage, "gone when the tab
    closes ("Forget" removes it at once)", and GraphiQL starts with it in its headers
    editor. GraphiQL's query history (on by default, in localStorage) saves each query
    run with its headers: the Bearer key outlives Forget and the tab, readable by every
    later tab of the browser profile."""
    key = served.keys["read"]
    context, page = open_page(browser, served, key)
    try:
        page.goto(f"{served.base}/graphql")
        page.wait_for_selector(".graphiql-container", timeout=15_000)
        page.click(".graphiql-query-editor .CodeMirror")
        page.keyboard.press("Control+A")
        page.keyboard.type("{ __typename }")
        page.click(".graphiql-execute-button")
        page.wait_for_selector(".result-window :text('Query')", timeout=10_000)
        visit(page, served, "/ui/")
        page.click("#key-forget")
        page.wait_for_selector("body[data-ready]")
        assert page.inner_text("#key-state") == "no key"
        later = context.new_page()  # another tab, as a user opens one later
        visit(later, served, "/ui/")
        kept = later.evaluate(
            "(key) => Object.keys(localStorage).filter((k) => localStorage.getItem(k).includes(key))",
            key,
        )
        assert kept == [], f"the forgotten key is still in localStorage under {kept}"
    finally:
        context.close()


def test_graphiqls_clear_storage_keeps_the_explorers_key(browser: Browser, served: Served) -> None:
    """GraphiQL's "Clear storage" clears the storage it is given: given the tab's
    sessionStorage itself, it took the explorer's key with it."""
    key = served.keys["read"]
    context, page = open_page(browser, served, key)
    try:
        page.goto(f"{served.base}/graphql")
        page.wait_for_selector(".graphiql-container", timeout=15_000)
        page.click("[aria-label='Open settings dialog']")
        page.click("button:has-text('Clear data')")
        page.wait_for_selector("button:has-text('Cleared data')", timeout=10_000)
        kept = page.evaluate("() => window.sessionStorage.getItem('causeway.key')")
        assert kept == key, (
            "GraphiQL's 'Clear storage' (its own data) removed the explorer's key from the "
            f"tab's sessionStorage: causeway.key is now {kept!r}"
        )
    finally:
        context.close()


def test_the_audits_truncated_note_gives_the_cause_that_cut_it(
    browser: Browser, server: URL, template_db: str, tmp_path: Path
) -> None:
    """With the server's node cap (CAUSEWAY_GRAPHQL_MAX_LINEAGE_NODES) at 3, the audit of
    a decision with five direct causes is truncated after one step; the page said "the
    lineage is deeper than the audit walked (50 steps)", a depth it never reached."""
    with explorer_service(server, template_db, tmp_path, graphql_max_lineage_nodes="3") as s:
        post(s, [cloudevent(id=f"wide-{n}") for n in range(5)])
        post(
            s, [cloudevent(id="wide-decision", causationid=",".join(f"wide-{n}" for n in range(5)))]
        )
        context, page = open_page(browser, s, s.keys["read"])
        try:
            visit(page, s, "/ui/events/wide-decision/audit")
            note = page.locator("#page .warning").inner_text()
            assert note.startswith("Truncated")
            assert "deeper than the audit walked (50 steps)" not in note, note
        finally:
            context.close()


def test_a_run_shows_the_drift_of_an_event_stamped_in_a_leap_second(
    browser: Browser, served: Served
) -> None:
    """The store takes a leap second (23:59:60Z, RFC 3339) and keeps its text; the run's
    page read it with Date.parse, which answers NaN: no circle on the time line and
    "—" for its drift, where docs/explorer.md promises the drift in seconds."""
    post(
        served,
        [
            cloudevent(id="leap-ok", correlationid="leap-run", time="2016-12-31T23:59:59Z"),
            cloudevent(id="leap-60", correlationid="leap-run", time="2016-12-31T23:59:60Z"),
        ],
    )
    context, page = open_page(browser, served, served.keys["read"])
    try:
        visit(page, served, "/ui/runs/leap-run")
        rows = page.locator("table.timeline-table tbody tr")
        drift = {
            rows.nth(i).locator("td").nth(1).inner_text(): rows.nth(i)
            .locator("td")
            .nth(5)
            .inner_text()
            for i in range(rows.count())
        }
        assert drift["leap-ok"].startswith("+")
        assert drift["leap-60"].startswith("+"), f"leap-second drift shown as {drift['leap-60']!r}"
    finally:
        context.close()


def test_an_audit_whose_model_produced_an_event_with_a_long_id_fits_the_page(
    browser: Browser, served: Served
) -> None:
    """The pages fit 1280x800 (docs/explorer.md); list items, cells and headings break a
    long id, but the audit's model card lists what the model produced in a <p> that does
    not: a 300-character id makes the audit page far wider than the screen."""
    admin = {"Authorization": f"Bearer {served.keys['admin']}", **JSON}
    body = {"version": "1", "signature": {"inputs": [], "outputs": []}}
    answer = httpx2.post(
        f"{served.base}/models/wide-model/versions", content=dumps(body), headers=admin
    )
    assert answer.status_code == 201, answer.text
    long_id = "made-" + "7" * 295
    post(
        served,
        [
            cloudevent(id=long_id, modelname="wide-model", modelversion="1", data={}),
            cloudevent(id="wide-audited", causationid=long_id),
        ],
    )
    context, page = open_page(browser, served, served.keys["read"])
    try:
        visit(page, served, "/ui/events/wide-audited/audit")
        assert page.locator("#page .error").count() == 0
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 1280, f"the audit page is {width} px wide"
    finally:
        context.close()
