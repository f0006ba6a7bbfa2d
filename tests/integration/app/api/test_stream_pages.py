"""``GET /streams/{stream}`` pages: a page ends at ``limit`` events or once it holds about
``PAGE_BYTES``, and when more follow it says where (``Link: <...>; rel="next"``, RFC 8288).
A page was built whole, however large (10,000 events of 1 MiB: a 10 GiB string), and a
full page looked the same as the stream's last one. The link names the stream
percent-encoded: built from the decoded path, a name with ``%`` linked another stream,
one with ``>`` made a link no parser reads, and one past Latin-1 a 500."""

from __future__ import annotations

import re
from urllib.parse import quote

import httpx2
import orjson

from app.store.reads import PAGE_BYTES
from tests.integration.events import BATCH, STRUCTURED, dumps, event

DATA = "x" * 1_000_000  # just under the 1 MiB bound on one event's data


def next_link(response: httpx2.Response) -> str | None:
    link = response.headers.get("link")
    if link is None:
        return None
    found = re.fullmatch(r'<([^>]+)>; rel="next"', link)
    assert found, link
    return found.group(1)


async def test_a_page_ends_at_its_byte_bound_and_links_the_next(
    client: httpx2.AsyncClient,
) -> None:
    for _ in range(12):
        posted = await client.post(
            "/events", content=dumps(event(stream="big", data={"blob": DATA})), headers=STRUCTURED
        )
        assert posted.status_code == 201, posted.text
    versions: list[int] = []
    url: str | None = "/streams/big?limit=12"
    pages = 0
    while url is not None:
        page = await client.get(url)
        assert page.status_code == 200, page.text
        assert len(page.content) <= PAGE_BYTES + 2 * len(DATA)  # one event past the bound
        versions += [e["streamversion"] for e in orjson.loads(page.content)]
        url = next_link(page)
        pages += 1
    assert versions == list(range(1, 13))  # each once, in order
    assert pages == 2


async def test_a_full_page_says_that_more_follow_and_the_last_does_not(
    client: httpx2.AsyncClient,
) -> None:
    for n in (2, 3):  # a stream of exactly two events, and one of three
        events = [event(stream=f"s{n}") for _ in range(n)]
        assert (await client.post("/events", content=dumps(events), headers=BATCH)).is_success
    last = await client.get("/streams/s2", params={"limit": 2, "min_position": 0})
    more = await client.get("/streams/s3", params={"limit": 2, "min_position": 0})
    assert len(last.json()) == len(more.json()) == 2
    assert next_link(last) is None
    following = next_link(more)
    assert following is not None
    assert "from_version=3" in following
    assert "limit=2" in following
    rest = await client.get(following)
    assert [e["streamversion"] for e in rest.json()] == [3]
    # min_position raised to the event the next page starts with: a source that does
    # not show it yet (a replica behind) is not asked for it.
    assert f"min_position={rest.json()[0]['position']}" in following
    assert next_link(rest) is None


async def _post(client: httpx2.AsyncClient, stream: str, n: int) -> None:
    events = [event(stream=stream, data={"in": stream}) for _ in range(n)]
    posted = await client.post("/events", content=dumps(events), headers=BATCH)
    assert posted.is_success, posted.text


async def test_the_next_link_of_a_stream_whose_name_holds_a_percent_sign_names_that_stream(
    client: httpx2.AsyncClient,
) -> None:
    # Two streams: "a%41" (three events) and "aA" (one event). The page of "a%41" must
    # link the rest of "a%41", not "aA".
    await _post(client, "a%41", 3)
    await _post(client, "aA", 1)
    first = await client.get(f"/streams/{quote('a%41', safe='')}", params={"limit": 2})
    assert first.status_code == 200, first.text
    assert [e["stream"] for e in first.json()] == ["a%41", "a%41"]
    following = await client.get(next_link(first) or "")
    assert following.status_code == 200, following.text
    assert [e["stream"] for e in following.json()] == ["a%41"], following.json()


async def test_a_stream_with_a_name_outside_latin1_and_more_than_a_page_is_answered(
    client: httpx2.AsyncClient,
) -> None:
    await _post(client, "カメラ", 2)
    first = await client.get(f"/streams/{quote('カメラ', safe='')}", params={"limit": 1})
    assert first.status_code == 200, first.text
    assert [e["stream"] for e in first.json()] == ["カメラ"]
    following = await client.get(next_link(first) or "")
    assert [e["streamversion"] for e in following.json()] == [2]


async def test_a_stream_whose_name_holds_a_closing_angle_bracket_gets_a_parsable_link(
    client: httpx2.AsyncClient,
) -> None:
    await _post(client, "in>out", 2)
    first = await client.get(f"/streams/{quote('in>out', safe='')}", params={"limit": 1})
    assert first.status_code == 200, first.text
    following = await client.get(next_link(first) or "")
    assert [e["stream"] for e in following.json()] == ["in>out"]


def min_position_of(response: httpx2.Response) -> int:
    link = response.headers["link"]
    found = re.search(r"[?&]min_position=(\d+)", link)
    assert found, link
    return int(found.group(1))


async def test_the_next_link_keeps_the_position_named_in_the_header(
    client: httpx2.AsyncClient,
) -> None:
    """The header Causeway-Min-Position is "the same as the min_position parameter": the
    link keeps the higher of it and the next page's first event, as for the parameter.
    It kept only the event's: followed, the page could be read where the client's own
    write did not show yet."""
    positions = []
    for _ in range(3):
        posted = await client.post(
            "/events", content=dumps(event(stream="mine")), headers=STRUCTURED
        )
        assert posted.status_code == 201, posted.text
        positions.append(int(posted.headers["Causeway-Position"]))
    last = positions[-1]
    by_parameter = await client.get("/streams/mine", params={"limit": "1", "min_position": last})
    by_header = await client.get(
        "/streams/mine", params={"limit": "1"}, headers={"Causeway-Min-Position": str(last)}
    )
    assert (min_position_of(by_parameter), min_position_of(by_header)) == (last, last)
