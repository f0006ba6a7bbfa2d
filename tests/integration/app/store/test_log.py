"""The log's invariants, checked against PostgreSQL itself: append-only, gap-free order
under concurrent writers, and a hash chain that names the row someone tampered with."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from sqlalchemy import URL, TextClause, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.db.engine import async_url, create_engine
from app.errors import InvalidEvent
from app.store.graph import GraphReader
from app.store.log import EventLog
from app.store.records import NewEvent
from app.store.timestamps import parse_rfc3339
from app.store.verify import ChainReport, verify_chain


def new(event_id: str, stream: str = "s", **fields: Any) -> NewEvent:
    return NewEvent(
        id=event_id,
        source="/src",
        type="t",
        stream=stream,
        has_data=True,
        data={"n": event_id},
        **fields,
    )


async def append(engine: AsyncEngine, tenant: str, *events: NewEvent) -> None:
    async with engine.begin() as conn:
        await EventLog(conn).append(tenant, events)


class TestAppendOnly:
    @pytest.mark.parametrize(
        "statement",
        [
            "UPDATE events SET type = 'x'",
            "DELETE FROM events",
            "TRUNCATE events CASCADE",
            "UPDATE event_causes SET cause = cause",
            "DELETE FROM event_causes",
            "TRUNCATE event_causes",
        ],
    )
    async def test_raw_sql_cannot_change_stored_rows(
        self, engine: AsyncEngine, statement: str
    ) -> None:
        await append(engine, "acme", new("a"), new("b", causes=("a",)))
        with pytest.raises(DBAPIError, match="append-only"):
            async with engine.begin() as conn:
                await conn.execute(text(statement))
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM events"))).scalar() == 2
            assert (await conn.execute(text("SELECT count(*) FROM event_causes"))).scalar() == 1


class TestGlobalOrder:
    async def test_a_reader_following_positions_never_skips_a_late_commit(
        self, database_url: URL
    ) -> None:
        writers, per_writer = 8, 40
        engine = create_engine(database_url, pool_size=writers + 2)
        seen: list[int] = []
        done = asyncio.Event()

        async def write(w: int) -> None:
            for i in range(per_writer):
                # Mixed batch sizes and a pause inside the transaction make commits land in
                # a different order than they started.
                batch = [new(f"w{w}-{i}-{k}", stream=f"w{w}") for k in range(1 + (i % 3))]
                async with engine.begin() as conn:
                    await EventLog(conn).append("acme", batch)
                    await asyncio.sleep(0.001 * (w % 3))

        async def read() -> None:
            last = 0
            async with engine.connect() as conn:
                while True:
                    finished = done.is_set()
                    rows = await conn.execute(
                        text("SELECT position FROM events WHERE position > :p ORDER BY position"),
                        {"p": last},
                    )
                    await conn.commit()
                    batch = [r[0] for r in rows]
                    seen.extend(batch)
                    last = batch[-1] if batch else last
                    if finished and not batch:
                        return
                    await asyncio.sleep(0)

        reader = asyncio.create_task(read())
        await asyncio.gather(*(write(w) for w in range(writers)))
        done.set()
        await reader
        async with engine.connect() as conn:
            stored = [r[0] for r in await conn.execute(text("SELECT position FROM events"))]
        await engine.dispose()
        assert sorted(stored) == seen
        assert seen == list(range(1, len(seen) + 1))
        assert len(seen) == writers * sum(1 + (i % 3) for i in range(per_writer))


async def forge(engine: AsyncEngine, table: str, statement: TextClause) -> None:
    """What a superuser can do: run ``statement`` past the trigger that keeps ``table``
    append-only."""
    async with engine.begin() as conn:
        await conn.execute(text(f"ALTER TABLE {table} DISABLE TRIGGER {table}_append_only"))
        await conn.execute(statement)
        await conn.execute(text(f"ALTER TABLE {table} ENABLE TRIGGER {table}_append_only"))


async def verified(engine: AsyncEngine) -> ChainReport:
    async with engine.connect() as conn:
        return await verify_chain(conn)


class TestHashChain:
    async def test_an_untouched_chain_verifies(self, engine: AsyncEngine) -> None:
        await append(engine, "acme", new("a"), new("b", causes=("a",)))
        await append(engine, "other", new("a", data_binary=b"\x00"))
        report = await verified(engine)
        assert report.is_intact
        assert report.count == 3

    async def test_numbers_of_events_built_in_code_are_stored_so_the_chain_verifies(
        self, engine: AsyncEngine
    ) -> None:
        # A registration or a route is built in code, past ingest's normalising: jsonb
        # reads -0.0 back as 0.0 and 1.0 as 1, and the chain broke at that event.
        numbers = NewEvent(id="a", source="/s", type="t", stream="s", has_data=True,
                           data={"d": -0.0, "one": 1.0, "l": [{"x": 2.0}]})  # fmt: skip
        await append(engine, "acme", numbers)
        report = await verified(engine)
        assert report.is_intact, report
        with pytest.raises(InvalidEvent, match="outside the I-JSON range"):
            await append(engine, "acme", replace(numbers, id="b", data={"gpu": 1e16}))
        assert (await verified(engine)).count == 1

    async def test_awkward_text_is_stored_exactly_and_verifies(self, engine: AsyncEngine) -> None:
        # Rows go in as COPY text written by hand: backslashes, tabs, newlines, quotes,
        # braces and things that look like COPY's own escapes must come back unchanged.
        cause = r'c\N,{"x"}\\'
        awkward = NewEvent(
            id="id\tx\\y",
            source=r"\\x00/src",
            type="t",
            stream="s\nline",
            subject="\\N",
            time="2026-11-30T12:00:00Z",
            has_data=True,
            data={"text": 'a\tb\nc\rd\\e"f', "\\k": ["{", "}", ",", "\\N"], "é": "✓"},
            extensions={"note": "tab\there", "path": "C:\\dir"},
            causes=(cause,),
            correlation_id="run\\1",
        )
        binary = NewEvent(id="bin", source="/s", type="t", stream="s", has_data=True,
                          data_binary=b"\t\n\\\x00\xff")  # fmt: skip
        await append(engine, "acme", new(cause), awkward, binary)
        async with engine.connect() as conn:
            found = await GraphReader(conn).fetch_by_ids("acme", [awkward.id, "bin"])
            report = await verify_chain(conn)
        stored = found[awkward.id].record
        assert (stored.id, stored.source, stored.stream, stored.subject) == (
            awkward.id,
            awkward.source,
            awkward.stream,
            awkward.subject,
        )
        assert (stored.data, stored.extensions, tuple(stored.causes)) == (
            awkward.data,
            awkward.extensions,
            (cause,),
        )
        assert stored.correlation_id == awkward.correlation_id
        assert found["bin"].record.data_binary == binary.data_binary
        assert report.is_intact

    @pytest.mark.parametrize("conforming", ["on", "off"])
    async def test_awkward_ids_and_streams_are_looked_up_exactly(
        self, database_url: URL, conforming: str
    ) -> None:
        # The lookups of a group (stored ids, stream versions, causes) carry their values
        # in the query's text, quoted on the client: quotes, backslashes, braces and
        # commas must find exactly the rows they name, however the server reads strings.
        engine = create_async_engine(
            async_url(database_url),
            connect_args={"options": f"-c standard_conforming_strings={conforming}"},
        )
        ids = ["it's", 'a"b', "c\\d", "{e,f}", "NULL", "g\\'h"]
        stream = 's\'\\{1,"2"}'
        try:
            first = [new(i, stream) for i in ids]
            async with engine.begin() as conn:
                await EventLog(conn).append("acme", first)
            async with engine.begin() as conn:
                again = await EventLog(conn).append(
                    "acme", [*first, new("next", stream, causes=(ids[0], ids[-1]))]
                )
            async with engine.connect() as conn:
                report = await verify_chain(conn)
        finally:
            await engine.dispose()
        assert [a.duplicate for a in again] == [True] * len(ids) + [False]
        assert [a.stream_version for a in again] == [*range(1, len(ids) + 1), len(ids) + 1]
        assert report.is_intact

    async def test_text_goes_out_in_the_connections_encoding(
        self, engine: AsyncEngine, database_url: URL
    ) -> None:
        # A client that talks LATIN1 to a UTF-8 database: PostgreSQL converts, nothing is
        # garbled; a character LATIN1 cannot carry is refused, and nothing is written.
        latin1 = create_async_engine(
            async_url(database_url), connect_args={"options": "-c client_encoding=LATIN1"}
        )
        try:
            accented = NewEvent(
                id="é", source="/src", type="t", stream="s", subject="Zürich", has_data=True,
                data={"k": "façade"},
            )  # fmt: skip
            await append(latin1, "acme", accented)
            with pytest.raises(psycopg.DataError):
                await append(latin1, "acme", new("check", subject="✓"))
        finally:
            await latin1.dispose()
        async with engine.connect() as conn:
            found = await GraphReader(conn).fetch_by_ids("acme", ["é", "check"])
            report = await verify_chain(conn)
        assert list(found) == ["é"]
        assert (found["é"].record.subject, found["é"].record.data) == ("Zürich", {"k": "façade"})
        assert report.is_intact

    async def test_offsets_up_to_23_59_are_stored_as_their_instant(
        self, engine: AsyncEngine
    ) -> None:
        sent = "2026-11-30T12:00:00-23:59"
        value, _ = parse_rfc3339(sent)
        await append(engine, "acme", new("far", time=sent, time_value=value))
        async with engine.connect() as conn:
            stored = (await conn.execute(text("SELECT time FROM events WHERE id = 'far'"))).scalar()
        assert stored == value

    async def test_tampering_with_data_is_found_at_that_position(self, engine: AsyncEngine) -> None:
        await append(engine, "acme", new("a"), new("b"), new("c"))
        await forge(
            engine, "events", text("""UPDATE events SET data = '{"n": "forged"}' WHERE id = 'b'""")
        )
        report = await verified(engine)
        assert not report.is_intact
        assert report.bad_position == 2
        assert report.count == 1

    async def test_data_forged_past_what_can_be_hashed_is_a_break_not_a_crash(
        self, engine: AsyncEngine
    ) -> None:
        # 300 levels have no canonical encoding (orjson stops at 255): no hash seals them.
        await append(engine, "acme", new("a"), new("b"))
        deep = "[" * 300 + "]" * 300
        forged = text("UPDATE events SET data = CAST(:deep AS jsonb) WHERE id = 'b'")
        await forge(engine, "events", forged.bindparams(deep=deep))
        report = await verified(engine)
        assert (report.bad_position, report.reason) == (2, "hash does not match the content")

    async def test_a_forged_causal_edge_is_found_at_its_effect(self, engine: AsyncEngine) -> None:
        # The graph's edges are not hashed: walks read them, so they must be what the
        # hashed causes name. Inserting one needs no trigger disabled.
        await append(engine, "acme", new("a"), new("b"), new("c", causes=("b",)))
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO event_causes (effect, cause) VALUES (3, 1)"))
        report = await verified(engine)
        assert (report.bad_position, report.reason) == (
            3,
            "causal edges differ from the causes it was hashed with",
        )

    async def test_a_deleted_causal_edge_is_found_at_its_effect(self, engine: AsyncEngine) -> None:
        await append(engine, "acme", new("a"), new("b", causes=("a",)), new("c"))
        await forge(engine, "event_causes", text("DELETE FROM event_causes WHERE effect = 2"))
        report = await verified(engine)
        assert (report.bad_position, report.reason) == (
            2,
            "causal edges differ from the causes it was hashed with",
        )

    async def test_a_deleted_edge_is_found_before_a_later_break(self, engine: AsyncEngine) -> None:
        # The edges were compared only once the whole chain checked out: a later change
        # was named first, and the edit where the tampering began not at all.
        await append(engine, "acme", new("a"), new("b", causes=("a",)), new("c"), new("d"))
        await forge(engine, "event_causes", text("DELETE FROM event_causes WHERE effect = 2"))
        await forge(
            engine, "events", text("""UPDATE events SET data = '{"n": 9}' WHERE id = 'd'""")
        )
        report = await verified(engine)
        assert (report.bad_position, report.reason) == (
            2,
            "causal edges differ from the causes it was hashed with",
        )

    async def test_a_rewritten_time_column_is_found(self, engine: AsyncEngine) -> None:
        # Filters read the time column; the chain holds the text it was derived from.
        sent = "2026-11-30T12:00:00Z"
        await append(engine, "acme", new("a", time=sent, time_value=parse_rfc3339(sent)[0]))
        await forge(engine, "events", text("UPDATE events SET time = '2020-01-01T00:00:00Z'"))
        report = await verified(engine)
        assert (report.bad_position, report.reason) == (1, "time differs from the hashed time")

    async def test_a_missing_log_head_is_a_break_not_a_crash(self, engine: AsyncEngine) -> None:
        await append(engine, "acme", new("a"))
        async with engine.begin() as conn:
            await conn.execute(text("DELETE FROM log_head"))
        report = await verified(engine)
        assert report.reason == "the log head row is missing"

    async def test_a_deleted_last_event_is_found(self, engine: AsyncEngine) -> None:
        await append(engine, "acme", new("a"), new("b"))
        await forge(engine, "events", text("DELETE FROM events WHERE position = 2"))
        report = await verified(engine)
        assert not report.is_intact
        assert report.reason == "log head names position 2, the log ends at 1"

    async def test_a_head_with_another_hash_is_named_as_such(self, engine: AsyncEngine) -> None:
        """It said "log head names position 2", true and no fault (from a review)."""
        await append(engine, "acme", new("a"), new("b"))
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE log_head SET hash = :h"), {"h": b"\xab" * 32})
        report = await verified(engine)
        assert (report.bad_position, report.reason) == (
            None,
            "log head's hash differs from the last event's",
        )
