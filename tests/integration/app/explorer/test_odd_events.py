"""The explorer with odd but valid events, each test driving Debian's Chromium against a
real ``causeway serve`` (as test_explorer.py does). From a review, each a fault before:
the depth form of the graph of ".." dropped its ?id=; the graph left out a link from an
ancestor straight to a descendant; a binary download took the producer's media type
parameters as data; a stream of more than a page did not say so; a long id made the
page wider than the screen, and so did a long id among an event's causes or effects;
with pages smaller than 500 (``CAUSEWAY_GRAPHQL_MAX_PAGE_SIZE``), "Recent events" missed
the newest; and an audit's model card showed what the model produced as text, not
links."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from playwright.sync_api import Browser, Page
from sqlalchemy import URL

from tests.integration.app.explorer.test_explorer import Served, explorer_service, open_page
from tests.integration.events import BATCH, JSON, dumps, registration
from tests.integration.events import event as cloudevent
from tests.integration.ingest.openlineage.shapes import dataset, facet, new_run, run_event


@pytest.fixture(scope="module")
def served(
    server: URL, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("explorer-odd")
    with explorer_service(server, template_db, folder) as service:
        yield service


def post(served: Served, batch: list[dict[str, Any]], key: str | None = None) -> None:
    auth = {"Authorization": f"Bearer {key or served.keys['ingest,read,worker']}"}
    answer = httpx2.post(
        f"{served.base}/events", content=dumps(batch), headers={**BATCH, **auth}, timeout=30
    )
    assert answer.status_code == 201, answer.text


def visit(page: Page, served: Served, path: str) -> None:
    page.goto(f"{served.base}{path}")
    page.wait_for_selector("body[data-ready]")


def test_changing_the_depth_of_the_graph_of_an_event_named_dot_dot_keeps_that_event(
    browser: Browser, served: Served
) -> None:
    """Ingest takes ".." as an id; its graph lives at /ui/events/_/lineage?id=..&up=3&down=3.
    The depth form (method GET, no action) replaces the whole query, ?id= included, so
    "Show" opens the graph of an event named "_" instead: "Could not show this page"."""
    post(served, [cloudevent(id=".."), cloudevent(id="after-dots", causationid="..")])
    context, page = open_page(browser, served, served.keys["read"])
    try:
        visit(page, served, "/ui/events/_/lineage?id=..&up=3&down=3")
        assert page.inner_text("#page h1") == "Lineage of .."
        page.select_option("#up", "2")
        page.click("form.depth button[type=submit]")
        page.wait_for_url("**/lineage?*up=2*")
        page.wait_for_selector("body[data-ready]")
        assert page.locator("#page .error").count() == 0, page.inner_text("#page")
        assert page.inner_text("#page h1") == "Lineage of .."
    finally:
        context.close()


def test_the_graph_draws_a_link_from_an_ancestor_straight_to_a_descendant(
    browser: Browser, served: Served
) -> None:
    """gA -> gB -> gC, and gC names gA as a cause too. On gB's graph all three events are
    drawn, but the link gA -> gC is not: the upstream walk's edges hold only its own
    nodes, the downstream walk's only its own, and the page draws just their union. The
    graph says "3 events, 2 links" and shows gC derived from gB alone."""
    post(
        served,
        [
            cloudevent(id="gA"),
            cloudevent(id="gB", causationid="gA"),
            cloudevent(id="gC", causationid="gB,gA"),
        ],
    )
    context, page = open_page(browser, served, served.keys["read"])
    try:
        visit(page, served, "/ui/events/gC/lineage?up=3&down=3")
        assert page.locator("#graph-summary").get_attribute("data-edges") == "3"  # all there
        visit(page, served, "/ui/events/gB/lineage?up=3&down=3")
        assert page.locator("svg.lineage a.node").count() == 3
        drawn = {
            (p.get_attribute("data-cause"), p.get_attribute("data-effect"))
            for p in page.locator("svg.lineage path.edge").all()
        }
        assert drawn == {("gA", "gB"), ("gB", "gC"), ("gA", "gC")}
    finally:
        context.close()


def test_binary_data_downloads_as_stored_whatever_its_content_type(
    browser: Browser, served: Served
) -> None:
    """A media type may carry a quoted parameter with a comma in it. The download link is
    ``data:<datacontenttype>;base64,<data>`` with the type pasted in unescaped: the first
    comma ends the data URL's header, so the file saved is the tail of the URL's text,
    not the event's bytes."""
    stored = b"hello world"
    post(
        served,
        [
            cloudevent(
                id="bin-comma",
                datacontenttype='application/octet-stream; name="a,b.bin"',
                data_base64=base64.b64encode(stored).decode(),
                data=...,
            )
        ],
    )
    context, page = open_page(browser, served, served.keys["read"])
    try:
        visit(page, served, "/ui/events/bin-comma")
        assert "Binary data, 11 bytes" in page.inner_text("#page")
        with page.expect_download() as download:
            page.click("#page a[download]")
        assert Path(download.value.path()).read_bytes() == stored
    finally:
        context.close()


def test_an_event_with_a_long_id_fits_the_page(browser: Browser, served: Served) -> None:
    """docs/explorer.md: "the pages fit 1280x800". An id of 300 characters (ingest takes
    it) is put unbroken in the page's heading and in its facts: the event page and its
    graph page grow far wider than 1280 pixels (2,300 here), with a horizontal scroll bar."""
    long_id = "order-" + "7" * 294
    post(served, [cloudevent(id=long_id, subject="s" * 200)])
    context, page = open_page(browser, served, served.keys["read"])
    try:
        for path in (f"/ui/events/{long_id}", f"/ui/events/{long_id}/lineage?up=1&down=1"):
            visit(page, served, path)
            assert page.locator("#page .error").count() == 0
            width = page.evaluate("() => document.documentElement.scrollWidth")
            assert width <= 1280, f"{path[:40]}...: the page is {width} px wide"
    finally:
        context.close()


def test_a_stream_of_more_than_500_events_says_it_shows_only_the_first_500(
    browser: Browser, served: Served
) -> None:
    """docs/explorer.md: a run's or a stream's page shows "the events (first 500)", and
    the page means to say "(the first 500)" when there are more. It reads
    ``data.page.hasNextPage``, which the answer does not have (it is
    ``data.page.pageInfo.hasNextPage``): a stream of 520 events is shown as "500 events.",
    as if that were all of it."""
    post(served, [cloudevent(id=f"long-{n:03}", source="/review/long") for n in range(520)])
    context, page = open_page(browser, served, served.keys["read"])
    try:
        visit(page, served, "/ui/streams/%2Freview%2Flong")
        assert page.locator("table.timeline-table tbody tr").count() == 500
        said = page.locator("#page > p").first.inner_text()
        assert said.startswith("500 events (the first 500)."), said
    finally:
        context.close()


@pytest.fixture(scope="module")
def small_pages(
    server: URL, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("explorer-small")
    with explorer_service(server, template_db, folder, graphql_max_page_size="100") as service:
        yield service


def test_the_start_page_lists_the_latest_events_when_pages_are_smaller(
    browser: Browser, small_pages: Served
) -> None:
    """150 events in the last 500 positions. recent() asks for 500, gets the oldest 100
    (hasNextPage true) and, as 100 < 500, takes the window as read: "Recent events"
    shows events 76-100 and never the newest 50."""
    post(small_pages, [cloudevent(id=f"ev-{n:03}") for n in range(150)])
    context, page = open_page(browser, small_pages, small_pages.keys["read"])
    try:
        visit(page, small_pages, "/ui/")
        rows = page.locator("table.recent tbody tr")
        assert rows.count() == 25
        assert rows.first.locator("td").nth(1).inner_text() == "ev-149"  # the newest first
    finally:
        context.close()


def test_the_audit_links_the_events_each_model_produced(browser: Browser, served: Served) -> None:
    """Each model's card links the events it produced. (The links came nested one level
    too deep for dom.js: the card read "Produced: ,http://host/ui/events/au-found".)"""
    registered = httpx2.post(
        f"{served.base}/models/au-detector/versions",
        content=dumps({"version": "1", "signature": {"inputs": [], "outputs": []}}),
        headers={**JSON, "Authorization": f"Bearer {served.keys['admin']}"},
        timeout=30,
    )
    assert registered.status_code == 201, registered.text
    post(
        served,
        [
            cloudevent(id="au-scan"),
            cloudevent(
                id="au-found",
                causationid="au-scan",
                modelname="au-detector",
                modelversion="1",
                data={},
            ),
            cloudevent(id="au-decision", causationid="au-found"),
        ],
    )
    context, page = open_page(browser, served, served.keys["read"])
    try:
        visit(page, served, "/ui/events/au-decision/audit")
        card = page.locator("#page section.card").filter(has_text="au-detector")
        produced = card.locator("p").filter(has_text="Produced")
        assert produced.inner_text() == "Produced: au-found"
        assert produced.locator("a").count() == 1
        assert produced.locator("a").get_attribute("href") == "/ui/events/au-found"
    finally:
        context.close()


def test_the_audit_shows_the_training_runs_and_data_behind_its_models(
    browser: Browser, served: Served
) -> None:
    """GraphQL's audit names the OpenLineage runs that trained the models used and the
    dataset versions upstream of them (docs/openlineage.md), and its chainVerified covers
    them; the audit page listed neither, so a red badge could blame an event the page did
    not show, and an auditor saw no training data at all."""
    prep, train = new_run(), new_run()
    raw, features = dataset("s3://au-lake", "raw"), dataset("s3://au-lake", "features")
    features_out = {
        **features,
        "outputFacets": {"outputStatistics": facet("OutputStatistics", rowCount=1200, size=4096)},
    }
    auth = {"Authorization": f"Bearer {served.keys['ingest,read,worker']}"}
    for sent in (
        run_event("START", prep, "prep", inputs=[raw]),
        run_event("COMPLETE", prep, "prep", outputs=[features_out]),
        run_event("START", train, "train", inputs=[features]),
        run_event("COMPLETE", train, "train"),
    ):
        answer = httpx2.post(
            f"{served.base}/api/v1/lineage", content=dumps(sent), headers={**JSON, **auth}
        )
        assert answer.status_code == 201, answer.text
    registered = httpx2.post(
        f"{served.base}/models/tr-detector/versions",
        content=registration("1", training_run=train),
        headers={**JSON, "Authorization": f"Bearer {served.keys['admin']}"},
        timeout=30,
    )
    assert registered.status_code == 201, registered.text
    post(
        served,
        [
            cloudevent(id="tr-found", modelname="tr-detector", modelversion="1", data={}),
            cloudevent(id="tr-decision", causationid="tr-found"),
        ],
    )
    context, page = open_page(browser, served, served.keys["read"])
    try:
        visit(page, served, "/ui/events/tr-decision/audit")
        assert page.locator("#page .error").count() == 0, page.inner_text("#page")
        assert page.locator("#page h2", has_text="Training runs (1)").count() == 1
        card = page.locator("#page section.training-run")
        assert card.locator("h3 a").inner_text() == train
        assert (
            card.locator("h3 a").get_attribute("href") == f"/ui/streams/openlineage%3Arun%3A{train}"
        )
        facts = card.locator("dl.facts").inner_text()
        assert "airflow / train" in facts, facts
        assert "COMPLETE" in facts, facts
        assert card.locator("tbody tr").count() == 2  # the run's START and COMPLETE
        assert page.locator("#page h2", has_text="Training data (2)").count() == 1
        rows = {
            r.locator("td").first.inner_text(): [c.inner_text() for c in r.locator("td").all()]
            for r in page.locator("#page table.training-data tbody tr").all()
        }
        assert set(rows) == {"s3://au-lake / features", "s3://au-lake / raw (external)"}, rows
        assert rows["s3://au-lake / features"][1:5] == ["none given", "1200", "4096", prep]
        # The prep run that wrote them: the audit's chain check covers its events too.
        further = page.locator("#page table.training-upstream tbody tr")
        assert further.count() == 2, page.inner_text("#page")
        assert further.locator("td:nth-child(2)").all_inner_texts() == [
            "io.openlineage.run.start",
            "io.openlineage.run.complete",
        ]
    finally:
        context.close()


def test_an_event_whose_cause_or_effect_has_a_long_id_fits_the_page(
    browser: Browser, served: Served
) -> None:
    """The pages fit 1280x800 with a long id among an event's causes or effects too (its
    list let no id break: some 2,300 pixels wide)."""
    long_id = "wide-" + "7" * 295
    post(
        served,
        [
            cloudevent(id="wide-parent"),
            cloudevent(id=long_id, causationid="wide-parent"),
            cloudevent(id="wide-child", causationid=long_id),
        ],
    )
    context, page = open_page(browser, served, served.keys["read"])
    try:
        for path in ("/ui/events/wide-child", "/ui/events/wide-parent"):
            visit(page, served, path)
            assert page.locator("#page .error").count() == 0
            assert page.locator(f'#page li a[href="/ui/events/{long_id}"]').count() == 1
            width = page.evaluate("() => document.documentElement.scrollWidth")
            assert width <= 1280, f"{path}: the page is {width} px wide"
    finally:
        context.close()
