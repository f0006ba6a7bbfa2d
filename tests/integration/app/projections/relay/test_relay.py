"""The relay on a real nats-server: what a consumer receives, in which mode, from which
tenants; one relay leading among several; NATS unreachable for 10 s, and restarted after a
quiet spell; a stream whose messages were purged, in part or whole."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator
from secrets import token_hex

import nats
import orjson
import pytest
from cloudevents.v1.http import from_json
from fastapi import FastAPI
from sqlalchemy import URL

from app.cli import main
from app.db.engine import create_engine
from app.main import create_app, dispose
from app.projections.checkpoints import read_head
from app.projections.relay.log import read_batch
from app.projections.relay.subjects import Tenants
from app.settings import Settings
from app.store.keys import KeyStore, parse_scopes
from app.wiring import create_relay
from tests.conftest import janitor
from tests.integration.app.projections.relay.jetstream import consume, wait_relayed
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import BATCH, dumps, event
from tests.integration.nats import Nats, nats_servers, needs_nats

pytestmark = needs_nats


@pytest.fixture
def nats_server() -> Iterator[Nats]:
    with nats_servers(1) as servers:
        yield servers


@contextlib.asynccontextmanager
async def relaying(settings: Settings, database_url: URL) -> AsyncIterator[FastAPI]:
    """The app with its relay running, as serve runs it."""
    app = create_app(settings, database_url=database_url)
    task = asyncio.create_task(app.state.relay.run())
    try:
        yield app
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await dispose(app)


def nats_settings(url: str, **more: object) -> Settings:
    return Settings(_env_file=None, nats_url=url, projection_poll_interval_s=0.2, **more)  # type: ignore[arg-type]


class TestStructured:
    async def test_a_consumer_reads_each_event_as_get_events_answers_it(
        self, nats_server: Nats, database_url: URL, make_key: MakeKey
    ) -> None:
        settings = nats_settings(nats_server.url, nats_tenants="-hidden")
        acme_key, hidden_key = await make_key("acme"), await make_key("hidden")
        octets = base64.b64encode(b"\x00\x01").decode()
        batch = [
            event(),
            event(type="com.example.odd type*>%.v1", data={"frame": 2}),
            event(data_base64=octets, datacontenttype="application/octet-stream", data=...),
        ]
        async with (
            relaying(settings, database_url) as app,
            asgi_client(app, acme_key) as acme,
            asgi_client(app, hidden_key) as hidden,
        ):
            assert (await acme.post("/events", content=dumps(batch), headers=BATCH)).is_success
            left_out = await hidden.post("/events", content=dumps([event()]), headers=BATCH)
            assert left_out.is_success
            await wait_relayed(app.state.relay._engine, "CAUSEWAY")
            got = await consume(nats_server.url, "CAUSEWAY", "check", 3)
            answers = [(await acme.get(f"/events/{sent['id']}")).content for sent in batch]
            status = (await acme.get("/projections")).json()["relay"]
        assert [m.subject for m in got] == [
            "causeway.acme.com.example.frame.v1",
            "causeway.acme.com.example.odd%20type%2A%3E%25.v1",
            "causeway.acme.com.example.frame.v1",
        ]
        for sent, message, answer in zip(batch, got, answers, strict=True):
            assert message.data == answer
            stored = orjson.loads(answer)
            assert message.headers["Nats-Msg-Id"] == f"acme:{stored['position']}"
            assert message.headers["Content-Type"] == "application/cloudevents+json"
            # The official SDK reads what the consumer received: through its v1 API, as
            # 2.x's strict core refuses the store's extension names with an underscore
            # (stream_version, prev_hash); docs/relay.md says so.
            read = from_json(message.data)
            assert read["id"] == sent["id"]
            assert read["type"] == sent["type"]
            assert read["position"] == stored["position"]
            assert read["streamversion"] == stored["streamversion"]
            assert read["hash"] == stored["hash"]
        assert from_json(got[0].data).data == {"frame": 1}
        assert from_json(got[2].data).data == b"\x00\x01"
        assert status["lag_events"] == 0
        assert status["checkpoint"] == status["head"]


class TestBinary:
    async def test_attributes_travel_as_ce_headers_and_the_data_alone_as_payload(
        self, nats_server: Nats, database_url: URL, make_key: MakeKey
    ) -> None:
        settings = nats_settings(nats_server.url, nats_mode="binary")
        sent = event(subject='caf\u00e9 "au" lait', data={"frame": 7})
        key = await make_key("acme")
        async with relaying(settings, database_url) as app, asgi_client(app, key) as acme:
            assert (await acme.post("/events", content=dumps([sent]), headers=BATCH)).is_success
            await wait_relayed(app.state.relay._engine, "CAUSEWAY")
            [message] = await consume(nats_server.url, "CAUSEWAY", "check", 1)
            stored = (await acme.get(f"/events/{sent['id']}")).json()
        assert "Content-Type" not in message.headers
        assert message.headers["ce-id"] == sent["id"]
        assert message.headers["ce-specversion"] == "1.0"
        assert message.headers["ce-subject"] == "caf%C3%A9%20%22au%22%20lait"
        assert message.headers["ce-position"] == str(stored["position"])
        assert message.headers["ce-hash"] == stored["hash"]
        assert orjson.loads(message.data) == {"frame": 7}


class TestLeadership:
    async def test_of_two_relays_one_leads_and_each_event_is_sent_once(
        self,
        nats_server: Nats,
        database_url: URL,
        make_key: MakeKey,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        settings = nats_settings(nats_server.url)
        second = create_relay(settings, database_url)
        assert second is not None
        key = await make_key("acme")
        caplog.set_level(logging.INFO, logger="app.projections.relay.relay")
        standby = asyncio.create_task(second.run())
        try:
            async with relaying(settings, database_url) as app, asgi_client(app, key) as acme:
                sent = [event() for _ in range(200)]
                for start in range(0, 200, 50):
                    batch = sent[start : start + 50]
                    assert (
                        await acme.post("/events", content=dumps(batch), headers=BATCH)
                    ).is_success
                await wait_relayed(app.state.relay._engine, "CAUSEWAY")
                got = await consume(nats_server.url, "CAUSEWAY", "check", 200)
                # Counted while both run: once the first stops, the standby may lead.
                leaders = caplog.text.count("leading")
        finally:
            standby.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await standby
            await second.dispose()
        assert [orjson.loads(m.data)["id"] for m in got] == [e["id"] for e in sent]
        assert leaders == 1

    async def test_relay_status_prints_the_checkpoint_and_the_lag(
        self,
        nats_server: Nats,
        database_url: URL,
        make_key: MakeKey,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        key = await make_key("acme")
        async with (
            relaying(nats_settings(nats_server.url), database_url) as app,
            asgi_client(app, key) as acme,
        ):
            assert (await acme.post("/events", content=dumps([event()]), headers=BATCH)).is_success
            await wait_relayed(app.state.relay._engine, "CAUSEWAY")
        monkeypatch.setenv(
            "CAUSEWAY_DATABASE_URL", database_url.render_as_string(hide_password=False)
        )
        monkeypatch.setenv("CAUSEWAY_NATS_TENANTS", "-hidden")
        monkeypatch.setattr("sys.argv", ["causeway", "relay", "status"])
        with pytest.raises(SystemExit) as exited:
            await asyncio.to_thread(main)  # the command runs its own event loop
        assert exited.value.code == 0
        header, row = capsys.readouterr().out.splitlines()
        assert header.split() == ["stream", "checkpoint", "head", "lag", "lag_s", "tenants"]
        stream, checkpoint, head, lag, lag_s, *tenants = row.split()
        assert (stream, checkpoint, lag, lag_s) == ("CAUSEWAY", head, "0", "0.0")
        assert " ".join(tenants) == "every tenant but hidden"


class TestTooLarge:
    async def test_an_event_over_max_payload_stops_the_relay_there_and_says_why(
        self, database_url: URL, make_key: MakeKey, caplog: pytest.LogCaptureFixture
    ) -> None:
        key = await make_key("acme")
        small, large, after = event(), event(data={"blob": "x" * 20_000}), event()
        with nats_servers(1, "max_payload: 8192") as server:
            async with (
                relaying(nats_settings(server.url), database_url) as app,
                asgi_client(app, key) as acme,
            ):
                batch = dumps([small, large, after])
                assert (await acme.post("/events", content=batch, headers=BATCH)).is_success
                async with asyncio.timeout(30):
                    # Once a session has resumed past what the stream holds: the small event.
                    while (await acme.get("/projections")).json()["relay"]["checkpoint"] < 1:
                        await asyncio.sleep(0.1)
                await asyncio.sleep(1)  # more tries: none gets past the large event
                status = (await acme.get("/projections")).json()["relay"]
                got = await consume(server.url, "CAUSEWAY", "check", 1, timeout_s=2)
        assert [orjson.loads(m.data)["id"] for m in got] == [small["id"]]  # none skipped
        assert status["lag_events"] == 2
        assert "raise max_payload in the server's configuration" in caplog.text

    # Binary mode puts each attribute in a header, percent-encoded (three bytes for each
    # of a non-ASCII one): headers of 5,400 bytes over a payload just within max_payload
    # were never counted ("headers are small"), and the server reset the connection at
    # every try, logged as ConnectionResetError.
    async def test_binary_headers_past_max_payload_stop_the_relay_and_say_why(
        self, database_url: URL, make_key: MakeKey, caplog: pytest.LogCaptureFixture
    ) -> None:
        key = await make_key("acme")
        large = event(subject="\u00e9" * 900, data={"x": "a" * 3800})
        with nats_servers(1, "max_payload: 8192") as server:
            settings = nats_settings(server.url, nats_mode="binary", max_attributes_bytes=2048)
            async with relaying(settings, database_url) as app, asgi_client(app, key) as acme:
                assert (
                    await acme.post("/events", content=dumps([large]), headers=BATCH)
                ).is_success
                async with asyncio.timeout(30):
                    while "raise max_payload in the server's configuration" not in caplog.text:
                        await asyncio.sleep(0.1)

    # 900 "é" are 1,800 bytes of type (CAUSEWAY_MAX_ATTRIBUTES_BYTES may be 2048) and a
    # subject of 5,400: past nats-server's control line, which reset the connection on
    # every try and logged only ConnectionResetError.
    async def test_an_event_whose_subject_is_too_long_stops_the_relay_there_and_says_why(
        self,
        database_url: URL,
        make_key: MakeKey,
        nats_server: Nats,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        key = await make_key("acme")
        small, long, after = event(), event(type="t." + "é" * 900), event()
        settings = nats_settings(nats_server.url, max_attributes_bytes=2048)
        async with relaying(settings, database_url) as app, asgi_client(app, key) as acme:
            batch = dumps([small, long, after])
            assert (await acme.post("/events", content=batch, headers=BATCH)).is_success
            async with asyncio.timeout(30):
                # Once a session has resumed past what the stream holds: the small event.
                while (await acme.get("/projections")).json()["relay"]["checkpoint"] < 1:
                    await asyncio.sleep(0.1)
                while "makes a subject of" not in caplog.text:
                    await asyncio.sleep(0.1)
            status = (await acme.get("/projections")).json()["relay"]
            got = await consume(nats_server.url, "CAUSEWAY", "check", 1, timeout_s=2)
        assert [orjson.loads(m.data)["id"] for m in got] == [small["id"]]  # none skipped
        assert status["lag_events"] == 2
        assert "keep CAUSEWAY_MAX_ATTRIBUTES_BYTES at 1300 or less" in caplog.text


class TestUnreachable:
    async def test_the_relay_waits_out_10_s_without_nats_and_the_api_answers_meanwhile(
        self, nats_server: Nats, database_url: URL, make_key: MakeKey
    ) -> None:
        settings = nats_settings(nats_server.url, nats_ack_timeout_s=1, nats_duplicate_window_s=10)
        ids: list[str] = []
        key = await make_key("acme")
        async with relaying(settings, database_url) as app, asgi_client(app, key) as acme:

            async def append(n: int) -> float:
                """Appends ``n`` batches; the slowest answer's seconds."""
                slowest = 0.0
                for _ in range(n):
                    batch = [event() for _ in range(20)]
                    ids.extend(e["id"] for e in batch)
                    started = time.monotonic()
                    answer = await acme.post("/events", content=dumps(batch), headers=BATCH)
                    slowest = max(slowest, time.monotonic() - started)
                    assert answer.is_success
                    await asyncio.sleep(0.05)
                return slowest

            await append(5)
            await wait_relayed(app.state.relay._engine, "CAUSEWAY")
            nats_server.pause()  # SIGSTOP: connections hang, nothing answers
            try:
                outage_started = time.monotonic()
                slowest = await append(50)
                await asyncio.sleep(max(0.0, 10 - (time.monotonic() - outage_started)))
                lagging = (await acme.get("/projections")).json()["relay"]
            finally:
                nats_server.resume()
            assert slowest < 2, "appends wait for nothing NATS does"
            assert lagging["lag_events"] > 0
            await append(5)
            await wait_relayed(app.state.relay._engine, "CAUSEWAY", timeout_s=60)
            got = await consume(nats_server.url, "CAUSEWAY", "check", len(ids))
        assert [orjson.loads(m.data)["id"] for m in got] == ids  # each once, in order


class TestRestart:
    async def test_after_a_restart_past_the_duplicate_window_the_relay_goes_on(
        self, database_url: URL, make_key: MakeKey
    ) -> None:
        """NATS restarts (same store, same port) and the log stays quiet for longer than the
        stream's duplicate window: the restarted server no longer knows its last message's
        id, and the relay's next session must still chain onto the stream. (A window of 1 s
        keeps the test short; the default 120 s behaves alike after two quiet minutes.)"""
        key = await make_key("acme")
        first, second = event(), event()
        with nats_servers(1) as server:
            settings = nats_settings(server.url, nats_ack_timeout_s=0.5, nats_duplicate_window_s=1)
            async with relaying(settings, database_url) as app, asgi_client(app, key) as acme:
                assert (
                    await acme.post("/events", content=dumps([first]), headers=BATCH)
                ).is_success
                await wait_relayed(app.state.relay._engine, "CAUSEWAY")
                server.kill(0)
                server.start(0)
                await asyncio.sleep(2.5)  # past the window
                assert (
                    await acme.post("/events", content=dumps([second]), headers=BATCH)
                ).is_success
                await wait_relayed(app.state.relay._engine, "CAUSEWAY", timeout_s=20)
                got = await consume(server.url, "CAUSEWAY", "check", 2, timeout_s=5)
        assert [orjson.loads(m.data)["id"] for m in got] == [first["id"], second["id"]]


class TestBatches:
    async def test_a_batch_ends_at_its_bytes_and_every_event_still_goes_in_order(
        self, nats_server: Nats, database_url: URL, make_key: MakeKey
    ) -> None:
        settings = nats_settings(nats_server.url, nats_batch_events=40, nats_batch_bytes=4096)
        key = await make_key("acme")
        # tiny events, and every seventh one of 3 KB: a batch of 40 would be ~20 KB
        sent = [event(data={"blob": "x" * (3000 if i % 7 == 0 else 1)}) for i in range(120)]
        async with relaying(settings, database_url) as app, asgi_client(app, key) as acme:
            assert (await acme.post("/events", content=dumps(sent), headers=BATCH)).is_success
            await wait_relayed(app.state.relay._engine, "CAUSEWAY")
            got = await consume(nats_server.url, "CAUSEWAY", "check", 120)
            async with app.state.engine.connect() as conn:
                head = await read_head(conn)
                capped = await read_batch(conn, 0, head, 40, 4096, Tenants())
                one = await read_batch(conn, 0, head, 40, 1024, Tenants())
                whole = await read_batch(conn, 0, head, 1000, 1 << 20, Tenants())
        assert [orjson.loads(m.data)["id"] for m in got] == [e["id"] for e in sent]
        # the bytes end it: more may follow; what it holds passed the cap by one document
        sizes = [len(e.document) for e in capped.events]
        assert capped.more
        assert 1 < len(sizes) < 40
        assert sum(sizes[:-1]) < 4096 <= sum(sizes)
        # the first event always comes, however large
        assert one.more
        assert [len(e.document) > 3000 for e in one.events] == [True]
        # under both limits: the head was reached
        assert not whole.more
        assert len(whole.events) == 120


class TestPurged:
    # A session's start read the stream's last sequence and asked for its message: when
    # that one was gone and others were not (a purge of one tenant's subjects, a deleted
    # message, a stream that drops acknowledged ones), every session failed, for good.
    async def test_the_relay_goes_on_after_the_streams_last_message_is_purged(
        self, database_url: URL, make_key: MakeKey, nats_server: Nats
    ) -> None:
        acme_key, globex_key = await make_key("acme"), await make_key("globex")
        first, last, later = event(), event(), event()
        settings = nats_settings(nats_server.url, nats_ack_timeout_s=1, nats_duplicate_window_s=5)
        async with (
            relaying(settings, database_url) as app,
            asgi_client(app, acme_key) as acme,
            asgi_client(app, globex_key) as globex,
        ):
            assert (await acme.post("/events", content=dumps([first]), headers=BATCH)).is_success
            assert (await globex.post("/events", content=dumps([last]), headers=BATCH)).is_success
            await wait_relayed(app.state.relay._engine, "CAUSEWAY")
        await _purge(nats_server.url, subject="causeway.globex.>")
        async with relaying(settings, database_url) as app, asgi_client(app, acme_key) as acme:
            assert (await acme.post("/events", content=dumps([later]), headers=BATCH)).is_success
            await wait_relayed(app.state.relay._engine, "CAUSEWAY", timeout_s=15)
        got = await consume(nats_server.url, "CAUSEWAY", "check", 2, timeout_s=3)
        assert [orjson.loads(m.data)["id"] for m in got] == [first["id"], later["id"]]

    async def test_a_purged_stream_is_warned_of(
        self,
        database_url: URL,
        make_key: MakeKey,
        nats_server: Nats,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """docs/relay.md: the relay "warns that the events between the stream's end and the
        checkpoint are not in it"; a stream purged whole returned before the warning."""
        key = await make_key("acme")
        settings = nats_settings(nats_server.url)
        async with relaying(settings, database_url) as app, asgi_client(app, key) as acme:
            sent = [event() for _ in range(3)]
            assert (await acme.post("/events", content=dumps(sent), headers=BATCH)).is_success
            await wait_relayed(app.state.relay._engine, "CAUSEWAY")
        await _purge(nats_server.url)
        caplog.set_level(logging.WARNING, logger="app.projections.relay.relay")
        async with relaying(settings, database_url) as app, asgi_client(app, key) as acme:
            assert (await acme.post("/events", content=dumps([event()]), headers=BATCH)).is_success
            await wait_relayed(app.state.relay._engine, "CAUSEWAY")
        assert "ends at no message of ours, its checkpoint is 3" in caplog.text, caplog.text
        assert "are not in it" in caplog.text


class TestRestored:
    # docs/operations.md: a restored store goes on where the dump stopped, so it gives its
    # positions again, to other events. Resumed past the stream's last message, the
    # relay skipped every one of them, silently.
    @pytest.mark.parametrize("mode", ["structured", "binary"])
    async def test_a_stream_past_a_restored_store_is_not_relayed_over(
        self,
        server: URL,
        database_url: URL,
        nats_server: Nats,
        caplog: pytest.LogCaptureFixture,
        mode: str,
    ) -> None:
        key = await _key_of(database_url)
        settings = nats_settings(nats_server.url, nats_mode=mode)
        async with relaying(settings, database_url) as app, asgi_client(app, key) as acme:
            assert (await acme.post("/events", content=dumps([event()]), headers=BATCH)).is_success
            await wait_relayed(app.state.relay._engine, "CAUSEWAY")
        backup = f"causeway_test_{token_hex(4)}"  # the store as a dump holds it now
        with janitor(server, backup, template_dbname=database_url.database):
            async with relaying(settings, database_url) as app, asgi_client(app, key) as acme:
                later = [event(), event()]
                assert (await acme.post("/events", content=dumps(later), headers=BATCH)).is_success
                await wait_relayed(app.state.relay._engine, "CAUSEWAY")
            caplog.set_level(logging.WARNING, logger="app.projections.relay.relay")
            restored = server.set(database=backup)
            async with relaying(settings, restored) as app, asgi_client(app, key) as acme:
                other = [event(), event()]  # positions 2 and 3 again
                assert (await acme.post("/events", content=dumps(other), headers=BATCH)).is_success
                deadline = time.monotonic() + 15
                while "another event than the log's there" not in caplog.text:
                    assert time.monotonic() < deadline, caplog.text
                    await asyncio.sleep(0.1)
        got = await consume(nats_server.url, "CAUSEWAY", "check", 5, timeout_s=2)
        assert len(got) == 3  # nothing was published onto it


async def _key_of(url: URL) -> str:
    """An ingest key of tenant acme, by an engine that is gone after (a database copied
    as a template must have no session)."""
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.begin() as conn:
            return (await KeyStore(conn).create("acme", parse_scopes("ingest,read"))).key
    finally:
        await engine.dispose()


async def _purge(url: str, subject: str | None = None) -> None:
    client = await nats.connect(url)
    try:
        await client.jetstream().purge_stream("CAUSEWAY", subject=subject)
    finally:
        await client.close()


async def test_a_restart_with_left_out_tenants_does_not_report_a_stream_missing_events(
    database_url: URL, make_key: MakeKey, caplog: pytest.LogCaptureFixture
) -> None:
    """The checkpoint moves past left-out tenants' events, so on a restart the stream's
    last message (acme's) lies behind it: that is no event missing from the stream. (It
    warned "events between are not in it" on every restart.)"""
    acme_key, globex_key = await make_key("acme"), await make_key("globex")
    sent = event()
    with nats_servers(1) as server:
        settings = nats_settings(server.url, nats_tenants="acme")
        async with (
            relaying(settings, database_url) as app,
            asgi_client(app, acme_key) as acme,
            asgi_client(app, globex_key) as globex,
        ):
            assert (await acme.post("/events", content=dumps([sent]), headers=BATCH)).is_success
            others = [event() for _ in range(3)]
            assert (await globex.post("/events", content=dumps(others), headers=BATCH)).is_success
            await wait_relayed(app.state.relay._engine, "CAUSEWAY")
        caplog.clear()
        caplog.set_level(logging.INFO, logger="app.projections.relay.relay")
        async with relaying(settings, database_url) as app, asgi_client(app, acme_key) as acme:
            later = event()
            assert (await acme.post("/events", content=dumps([later]), headers=BATCH)).is_success
            await wait_relayed(app.state.relay._engine, "CAUSEWAY")
        got = await consume(server.url, "CAUSEWAY", "check", 2, timeout_s=3)
    assert [orjson.loads(m.data)["id"] for m in got] == [sent["id"], later["id"]]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [w for w in warnings if "are not in it" in w], warnings


async def test_a_restart_before_any_relayed_tenant_wrote_does_not_report_missing_events(
    database_url: URL, make_key: MakeKey, caplog: pytest.LogCaptureFixture
) -> None:
    globex_key = await make_key("globex")
    with nats_servers(1) as server:
        settings = nats_settings(server.url, nats_tenants="acme")
        async with relaying(settings, database_url) as app, asgi_client(app, globex_key) as globex:
            others = [event() for _ in range(3)]
            assert (await globex.post("/events", content=dumps(others), headers=BATCH)).is_success
            await wait_relayed(app.state.relay._engine, "CAUSEWAY")  # past globex's events
        caplog.clear()
        caplog.set_level(logging.INFO, logger="app.projections.relay.relay")
        async with relaying(settings, database_url) as app, asgi_client(app, globex_key) as globex:
            more = [event()]
            assert (await globex.post("/events", content=dumps(more), headers=BATCH)).is_success
            await wait_relayed(app.state.relay._engine, "CAUSEWAY")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    # Nothing the relay takes was ever in the log: no event can be missing from the stream.
    assert not [w for w in warnings if "are not in it" in w], warnings
