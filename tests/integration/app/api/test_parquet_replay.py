"""Replay as Parquet over HTTP: the same events as the NDJSON replay, a column each."""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx2
import orjson
import pyarrow.parquet as pq
import pytest
from sqlalchemy import URL, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.replay import PARQUET
from app.main import create_app, dispose
from app.settings import Settings
from app.store.parquet import SCHEMA, parquet_file
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import BATCH, STRUCTURED, causes_of, dumps, event


async def replayed(client: httpx2.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    response = await client.get("/replay", params={**params, "format": "parquet"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == PARQUET
    table = pq.read_table(io.BytesIO(response.content))
    assert table.schema == SCHEMA
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


async def ndjson(client: httpx2.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    response = await client.get("/replay", params=params)
    return [orjson.loads(line) for line in response.text.splitlines()]


async def test_every_attribute_arrives_as_the_ndjson_replay_gives_it(
    client: httpx2.AsyncClient,
) -> None:
    first = event(subject="gate-1", time="2026-11-30T12:00:00.123456789+01:00", note="x")
    batch = [
        first,
        event(causationid=first["id"], correlationid="run-1", data=None),
        event(data={"nested": [1, 2.5, "é"]}, datacontenttype="application/json"),
    ]
    await client.post("/events", content=dumps(batch), headers=BATCH)
    binary = {
        "ce-specversion": "1.0",
        "ce-id": "bin-1",
        "ce-source": "/s",
        "ce-type": "t",
        "Content-Type": "image/png",
    }
    await client.post("/events", content=b"\x89PNG\x00", headers=binary)
    await client.post("/events", content=dumps(event(data=...)), headers=STRUCTURED)

    columns = await replayed(client)
    lines = await ndjson(client)
    assert len(columns) == len(lines) == 5
    for row, line in zip(columns, lines, strict=True):
        assert row["id"] == line["id"]
        assert row["position"] == line["position"]
        for name in ("source", "type", "subject", "stream", "streamversion"):
            assert row[name] == line.get(name), name
        assert row["causes"] == causes_of(line)
        for name in ("datacontenttype", "correlationid", "modelname", "modelsig"):
            assert row[name] == line.get(name), name
        assert row["time_text"] == line.get("time")
        if row["time"] is not None:
            assert row["time"] == datetime.fromisoformat(line["time"][:26] + line["time"][29:])
        assert row["storedtime"].isoformat() == line["storedtime"].replace("Z", "+00:00")
        assert (row["prevhash"].hex(), row["hash"].hex()) == (line["prevhash"], line["hash"])
        if "data" in line:
            assert orjson.loads(row["data"]) == line["data"]
        else:
            assert row["data"] is None
        expected_binary = base64.b64decode(line["data_base64"]) if "data_base64" in line else None
        assert row["data_binary"] == expected_binary
        for name, value in orjson.loads(row["extensions"]).items():
            assert line[name] == value
    assert columns[0]["time_text"] == "2026-11-30T12:00:00.123456789+01:00"
    assert orjson.loads(columns[0]["extensions"]) == {"note": "x"}
    assert columns[1]["data"] == "null"  # JSON null: not the same as no data (row 4)
    assert columns[4]["data"] is None
    assert columns[3]["data_binary"] == b"\x89PNG\x00"


@pytest.mark.parametrize(
    "params",
    [{}, {"types": "a.v1,c.v1"}, {"after": 3}, {"after": 1, "limit": 3}, {"stream": "s2"}],
)
async def test_filters_and_resume_select_what_the_ndjson_replay_selects(
    client: httpx2.AsyncClient, params: dict[str, Any]
) -> None:
    kinds = ["a.v1", "b.v1", "c.v1", "a.v1", "b.v1", "c.v1"]
    batch = [event(type=kind, stream=f"s{i % 3}") for i, kind in enumerate(kinds)]
    await client.post("/events", content=dumps(batch), headers=BATCH)
    expected = [line["id"] for line in await ndjson(client, **params)]
    assert [row["id"] for row in await replayed(client, **params)] == expected
    assert expected  # each case selects something


async def test_nothing_to_replay_is_still_a_file_with_the_columns(
    client: httpx2.AsyncClient,
) -> None:
    assert await replayed(client) == []


async def test_an_unknown_format_is_a_422_problem(client: httpx2.AsyncClient) -> None:
    response = await client.get("/replay", params={"format": "xml"})
    assert response.status_code == 422
    assert response.json()["errors"][0]["pointer"] == "#/query/format"


async def test_row_groups_go_out_as_they_fill_and_the_footer_last() -> None:
    """Flat memory: the file leaves in pieces while rows still come, not at the end."""
    rows = [_row(position) for position in range(1, 11)]
    pieces: list[bytes] = []
    delivered: list[int] = []

    async def chunks() -> AsyncIterator[Sequence[tuple[Any, ...]]]:
        for start in range(0, len(rows), 2):
            delivered.append(start + 2)
            yield rows[start : start + 2]

    async for piece in parquet_file(chunks(), row_group_rows=4):
        pieces.append(piece)
        if len(pieces) == 2:
            assert delivered[-1] == 4  # the first row group was out before more rows came
    assert pieces[0] == b"PAR1"  # at once: a client sees bytes before any row is read
    whole = pq.ParquetFile(io.BytesIO(b"".join(pieces)))
    assert whole.metadata.num_row_groups == 3  # 4 + 4 + 2
    assert [r["position"] for r in whole.read().to_pylist()] == list(range(1, 11))
    assert len(pieces) == 4  # the header, two full groups, then the last with the footer


async def test_big_rows_make_smaller_row_groups() -> None:
    """However large the events, a row group holds ``row_group_bytes`` at most (or one
    row, when a row alone is larger)."""

    async def chunks() -> AsyncIterator[Sequence[tuple[Any, ...]]]:
        for position in range(1, 7):
            yield [_row(position, data="x" * 1000)]

    pieces = [piece async for piece in parquet_file(chunks(), row_group_bytes=2500)]
    whole = pq.ParquetFile(io.BytesIO(b"".join(pieces)))
    # Rows of about 1.2 kB: a third would take a group past 2,500 bytes.
    assert whole.metadata.num_row_groups == 3
    assert [len(r["data"]) for r in whole.read().to_pylist()] == [1000] * 6


@pytest.mark.parametrize(
    ("limits", "sizes"),
    [({"row_group_rows": 5}, [5, 5, 2]), ({"row_group_bytes": 2500}, [2] * 6)],
    ids=["rows", "bytes"],
)
async def test_a_chunk_larger_than_a_row_group_is_split(
    limits: dict[str, int], sizes: list[int]
) -> None:
    """A fetch can hold more than a row group: the group still keeps to its limits (one
    fetch of large events was one row group of 80 MB)."""

    async def chunks() -> AsyncIterator[Sequence[tuple[Any, ...]]]:
        yield [_row(position, data="x" * 1000) for position in range(1, 13)]

    pieces = [piece async for piece in parquet_file(chunks(), **limits)]
    whole = pq.ParquetFile(io.BytesIO(b"".join(pieces)))
    groups = [whole.metadata.row_group(i).num_rows for i in range(whole.metadata.num_row_groups)]
    assert groups == sizes
    assert [r["position"] for r in whole.read().to_pylist()] == list(range(1, 13))


def _row(position: int, data: str = "{}") -> tuple[Any, ...]:
    when = datetime.fromisoformat("2026-11-30T12:00:00+00:00")
    return (
        position, f"e{position}", "/s", "t", None, when, "2026-11-30T12:00:00Z", when, "s",
        position, None, None, data, None, "{}", [], None, None, None, None, bytes(32),
        bytes(32),
    )  # fmt: skip


async def test_times_read_back_in_utc_whatever_the_servers_time_zone(
    database_url: URL, engine: AsyncEngine, make_key: MakeKey
) -> None:
    # West of UTC, year 1 at midnight UTC (Go's zero time) is a year before 1.
    async with engine.begin() as conn:
        await conn.execute(
            text(f"ALTER DATABASE \"{database_url.database}\" SET TimeZone = 'America/New_York'")
        )
    app = create_app(Settings(_env_file=None), database_url=database_url)
    async with asgi_client(app, await make_key("acme", "ingest,read")) as client:
        edges = [event(time="0001-01-01T00:00:00Z"), event(time="9999-12-31T23:59:59Z")]
        await client.post("/events", content=dumps(edges), headers=BATCH)
        rows = await replayed(client)
    await dispose(app)
    assert [r["time"] for r in rows] == [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
    ]


@pytest.mark.parametrize(
    "chunk_sizes",
    [[[100] * 90 + [30_000] * 10], [[700] * 90, [30_000] * 5]],
    ids=["mixed-in-one-fetch", "larger-in-the-next-fetch"],
)
async def test_rows_of_any_sizes_keep_a_group_within_its_bytes(
    chunk_sizes: list[list[int]],
) -> None:
    """Rows are measured, not taken at their fetch's average: a fetch of small rows with
    a few large ones among them made a row group of 95 MB under a 64 MB limit."""
    limit = 100_000

    async def chunks() -> AsyncIterator[Sequence[tuple[Any, ...]]]:
        position = 0
        for sizes in chunk_sizes:
            chunk = []
            for size in sizes:
                position += 1
                chunk.append(_row(position, data="x" * size))
            yield chunk

    pieces = [piece async for piece in parquet_file(chunks(), row_group_bytes=limit)]
    whole = pq.ParquetFile(io.BytesIO(b"".join(pieces)))
    groups = [whole.read_row_group(i) for i in range(whole.metadata.num_row_groups)]
    assert all(group.nbytes <= limit for group in groups)
    assert sum(group.num_rows for group in groups) == sum(map(len, chunk_sizes))
    assert groups[0].num_rows > 50  # small rows still share a group
