"""The explorer (``/ui/``) in Debian's Chromium against a real ``causeway serve``: names
that need escaping, graphs of odd shapes, and what a page says when the API (or a proxy
in front of it) fails or never answers (from a review, each a fault before: a proxy's
HTML error page read "Unexpected token '<'", an answer that never came left "Loading..."
for ever, and a stray "%" in the address read "URI malformed"). One server for the module, with
a node cap of 6 on a walk so that a small graph is already "larger than the limit"."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx2
import pytest
from playwright.sync_api import Browser, Page, Route
from sqlalchemy import URL

from tests.integration.app.explorer.test_explorer import Served, explorer_service, open_page
from tests.integration.events import BATCH, dumps
from tests.integration.events import event as cloudevent

# Every character a path, a query or HTML would take as its own: / ? # % space quotes
# angle brackets, an escape that looks done already (%25), and non-ASCII.
ODD_ID = 'od"d/<img src=x onerror="window.__x=1"> ?#%25 é名'
ODD_RUN = 'run/<img src=y onerror="window.__x=2"> ?x=1#y \''
ODD_STREAM = "str/ <script>window.__x=3</script>?#%"


@pytest.fixture(scope="module")
def served(
    server: URL, template_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("explorer-odd-names")
    with explorer_service(server, template_db, folder, graphql_max_lineage_nodes="6") as s:
        yield s


def post(served: Served, batch: list[dict[str, Any]]) -> None:
    auth = {"Authorization": f"Bearer {served.keys['ingest,read,worker']}"}
    answer = httpx2.post(
        f"{served.base}/events", content=dumps(batch), headers={**BATCH, **auth}, timeout=30
    )
    assert answer.status_code == 201, answer.text


def ready(page: Page) -> None:
    page.wait_for_selector("body[data-ready]")


def visit(page: Page, served: Served, path: str) -> None:
    page.goto(f"{served.base}{path}")
    ready(page)


def follow(page: Page, selector: str) -> None:
    page.click(selector)
    page.wait_for_load_state()
    ready(page)


def injected(page: Page) -> list[Any]:
    """What a name parsed as HTML would have done: run its script, or made elements."""
    return [
        page.evaluate("() => window.__x"),
        page.locator("#page img, #page script").count(),
    ]


def test_names_that_need_escaping_link_round_trip_and_stay_text(
    browser: Browser, served: Served
) -> None:
    post(
        served,
        [
            cloudevent(id="esc-cause"),
            cloudevent(
                id=ODD_ID, causationid="esc-cause", correlationid=ODD_RUN, stream=ODD_STREAM
            ),
            cloudevent(id="esc-effect", causationid=ODD_ID),
        ],
    )
    context, page = open_page(browser, served, served.keys["read"])
    try:
        visit(page, served, f"/ui/find?q={quote(ODD_ID, safe='')}")
        page.wait_for_url("**/ui/events/*")
        ready(page)
        assert page.inner_text("#page h1") == f"Event {ODD_ID}"
        follow(page, "#page .actions a:text-is('Lineage graph')")
        assert page.inner_text("#page h1") == f"Lineage of {ODD_ID}"
        ids = {a.get_attribute("data-id") for a in page.locator("svg.lineage a.node").all()}
        assert ids == {"esc-cause", ODD_ID, "esc-effect"}

        page.select_option("#up", "2")  # the depth form keeps the event
        follow(page, "form.depth button[type=submit]")
        assert page.inner_text("#page h1") == f"Lineage of {ODD_ID}"
        page.reload()  # a deep link shows the same graph, at the depth chosen
        ready(page)
        assert page.inner_text("#page h1") == f"Lineage of {ODD_ID}"
        assert page.locator("#up").input_value() == "2"
        page.go_back()
        ready(page)
        page.go_back()
        ready(page)
        assert page.inner_text("#page h1") == f"Event {ODD_ID}"
        follow(page, "#page .actions a:text-is('Workflow run')")
        assert page.inner_text("#page h1") == f"Workflow run {ODD_RUN}"
        assert page.locator("table.timeline-table tbody tr").count() == 1
        page.go_back()
        ready(page)
        follow(page, "#page .actions a:text-is('Stream')")
        assert page.inner_text("#page h1") == f"Stream {ODD_STREAM}"
        page.go_back()
        ready(page)
        follow(page, "#page .actions a:text-is('Audit')")
        assert page.inner_text("#page h1") == f"Audit of {ODD_ID}"
        assert page.locator("#page .error").count() == 0, page.inner_text("#page")
        assert injected(page) == [None, 0]
    finally:
        context.close()


def test_graphs_of_one_node_a_diamond_and_more_than_the_servers_cap(
    browser: Browser, served: Served
) -> None:
    post(
        served,
        [
            cloudevent(id="alone"),
            cloudevent(id="dia-a"),
            cloudevent(id="dia-b", causationid="dia-a"),
            cloudevent(id="dia-c", causationid="dia-a"),
            cloudevent(id="dia-d", causationid="dia-b,dia-c"),
            *[cloudevent(id=f"fan-{n}") for n in range(10)],
        ],
    )
    post(served, [cloudevent(id="fan-in", causationid=",".join(f"fan-{n}" for n in range(10)))])
    context, page = open_page(browser, served, served.keys["read"])
    try:
        visit(page, served, "/ui/events/alone/lineage")
        summary = page.locator("#graph-summary")
        assert (summary.get_attribute("data-nodes"), summary.get_attribute("data-edges")) == (
            "1",
            "0",
        )
        assert page.locator("#truncated").count() == 0
        visit(page, served, "/ui/events/dia-d/lineage")
        drawn = {
            (p.get_attribute("data-cause"), p.get_attribute("data-effect"))
            for p in page.locator("svg.lineage path.edge").all()
        }
        assert drawn == {
            ("dia-a", "dia-b"),
            ("dia-a", "dia-c"),
            ("dia-b", "dia-d"),
            ("dia-c", "dia-d"),
        }
        y = {
            i: float(
                page.locator(f'svg.lineage a.node[data-id="{i}"] rect').first.get_attribute("y")
                or ""
            )
            for i in ("dia-a", "dia-b", "dia-c", "dia-d")
        }
        assert y["dia-a"] < y["dia-b"] == y["dia-c"] < y["dia-d"], y  # the cause once, above both
        assert page.locator("#truncated").count() == 0
        visit(page, served, "/ui/events/fan-in/lineage")
        assert page.locator("#page .error").count() == 0, page.inner_text("#page")
        assert page.locator("svg.lineage a.node").count() == 6  # the server's cap, root included
        assert page.locator("#truncated").is_visible()
    finally:
        context.close()


PROXY_PAGE = "<html><head><title>503</title></head><body><h1>Service Unavailable</h1></body></html>"


def test_an_error_page_of_a_proxy_is_shown_as_its_status(browser: Browser, served: Served) -> None:
    """A proxy in front of the service (docs/deployment.md) answers 502/503/504 with its own
    HTML page. The explorer parsed every answer as JSON: the page said "Unexpected token
    '<', "<html><hea"... is not valid JSON", and nothing of the 503."""
    post(served, [cloudevent(id="behind-proxy")])
    context, page = open_page(browser, served, served.keys["read"])

    def unavailable(route: Route) -> None:
        route.fulfill(status=503, content_type="text/html", body=PROXY_PAGE)

    try:
        context.route("**/graphql", unavailable)
        visit(page, served, "/ui/events/behind-proxy")
        said = page.inner_text("#page .error")
        assert "503" in said, said
        assert "JSON" not in said, said
    finally:
        context.close()


def test_a_request_that_never_answers_ends_in_a_message(browser: Browser, served: Served) -> None:
    """A request held open (a proxy, a network that drops the answer) left the page at
    "Loading..." for ever: fetch() has no time limit of its own."""
    post(served, [cloudevent(id="never-answered")])
    context, page = open_page(browser, served, served.keys["read"])
    held: list[Route] = []
    try:
        context.route("**/graphql", lambda route: held.append(route))  # never answered
        page.clock.install()
        page.goto(f"{served.base}/ui/events/never-answered")
        page.wait_for_function(
            "() => document.querySelector('#page').innerText.includes('Loading')"
        )
        page.wait_for_timeout(200)
        assert held, "the page asked nothing of /graphql"
        page.clock.run_for(120_000)
        ready(page)
        said = page.inner_text("#page .error")
        assert "did not answer" in said, said
    finally:
        context.close()


def test_a_stray_percent_in_the_address_is_named(browser: Browser, served: Served) -> None:
    """/ui/events/50%off (typed, or a link made without escaping): the page said only
    "URI malformed", JavaScript's words, not what is wrong with the address."""
    context, page = open_page(browser, served, served.keys["read"])
    try:
        visit(page, served, "/ui/events/50%off")
        said = page.inner_text("#page .error")
        assert "%25" in said, said
    finally:
        context.close()
