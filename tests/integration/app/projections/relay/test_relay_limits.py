"""The relay against docs/relay.md, from a review: a message just over the server's
max_payload (the relay's own count left out the header nats-py adds for the stream) was
sent, the server reset the connection, and the relay looped on ack timeouts without ever
naming the event; a second stream on the same subjects was retried for ever. And the
subjects, message ids and lag metric of a tenant with a dot in its name."""

from __future__ import annotations

import asyncio
import logging
import time

import orjson
import pytest
from sqlalchemy import URL

from app.projections.relay.messages import check_size as _check_size
from tests.integration.app.projections.relay.jetstream import consume
from tests.integration.app.projections.relay.test_relay import nats_settings, relaying
from tests.integration.conftest import MakeKey, asgi_client
from tests.integration.events import BATCH, dumps, event
from tests.integration.nats import nats_servers, needs_nats

pytestmark = needs_nats

MAX_PAYLOAD = 8192
TOO_LARGE = "raise max_payload in the server's configuration"


def _wire_size(headers: dict[str, str], payload: bytes) -> int:
    """What nats-py writes for HPUB (NATS/1.0\\r\\n, "k: v\\r\\n" each, \\r\\n) plus the
    payload: the size nats-server compares with max_payload."""
    return 12 + sum(len(k) + len(v) + 4 for k, v in headers.items()) + len(payload)


class TestTooLargeAtTheEdge:
    async def test_a_message_just_over_max_payload_is_named_not_an_ack_timeout(
        self, database_url: URL, make_key: MakeKey, caplog: pytest.LogCaptureFixture
    ) -> None:
        """docs/relay.md: at an event too large for NATS the relay "stops at such an event
        and logs its position, the message's size and the limit every 10 s". A message
        within 30 bytes past max_payload passes the relay's own size check (nats-py adds
        the Nats-Expected-Stream header after it) and the server drops the connection:
        the relay then loops on ack timeouts and never names the event."""
        key = await make_key("acme")
        caplog.set_level(logging.WARNING, logger="app.projections.relay.relay")
        with nats_servers(1, f"max_payload: {MAX_PAYLOAD}") as server:
            settings = nats_settings(server.url, nats_ack_timeout_s=1, nats_duplicate_window_s=5)
            async with relaying(settings, database_url) as app, asgi_client(app, key) as acme:
                first = event(id="evt-review-a", data={"blob": "x"})
                assert (
                    await acme.post("/events", content=dumps([first]), headers=BATCH)
                ).is_success
                async with asyncio.timeout(20):
                    while (await acme.get("/projections")).json()["relay"]["checkpoint"] < 1:
                        await asyncio.sleep(0.1)
                doc_a = (await acme.get(f"/events/{first['id']}")).content
                stored_a = orjson.loads(doc_a)
                pos_a = stored_a["position"]
                # B's headers as the relay sends them in this session (chained to A)
                headers_b = {
                    "Content-Type": "application/cloudevents+json",
                    "Nats-Msg-Id": f"acme:{pos_a + 1}",
                    "Nats-Expected-Last-Msg-Id": f"acme:{pos_a}",
                    "Nats-Expected-Stream": "CAUSEWAY",  # nats-py adds it (stream=)
                }
                target = MAX_PAYLOAD + 15  # 15 bytes over the server's limit
                blob = target - _wire_size(headers_b, doc_a) + 1
                second = event(id="evt-review-b", data={"blob": "x" * blob})
                assert (
                    await acme.post("/events", content=dumps([second]), headers=BATCH)
                ).is_success
                doc_b = (await acme.get(f"/events/{second['id']}")).content
                wire = _wire_size(headers_b, doc_b)
                relay_headers = {k: v for k, v in headers_b.items() if k != "Nats-Expected-Stream"}
                _check_size(pos_a + 1, doc_b, relay_headers, MAX_PAYLOAD)  # the relay lets it by
                assert wire > MAX_PAYLOAD, wire  # the server does not
                deadline = time.monotonic() + 15
                while TOO_LARGE not in caplog.text and time.monotonic() < deadline:
                    await asyncio.sleep(0.2)
                logged = [r.getMessage() for r in caplog.records]
        assert TOO_LARGE in caplog.text, (wire, logged)


class TestNewStream:
    async def test_a_second_stream_on_the_same_subjects_is_refused_in_words(
        self, database_url: URL, make_key: MakeKey, caplog: pytest.LogCaptureFixture
    ) -> None:
        """docs/relay.md said "to send the past, start a new stream (CAUSEWAY_NATS_STREAM)".
        On the same NATS account the old stream still takes causeway.>, JetStream refuses
        a second stream on those subjects, and the relay retried for ever on JetStream's
        "subjects overlap" (its checkpoint at 0). It says what to do now, and the docs say
        to delete the old stream first."""
        key = await make_key("acme")
        caplog.set_level(logging.WARNING, logger="app.projections.relay.relay")
        with nats_servers(1) as server:
            sent = [event() for _ in range(3)]
            async with (
                relaying(nats_settings(server.url), database_url) as app,
                asgi_client(app, key) as acme,
            ):
                assert (await acme.post("/events", content=dumps(sent), headers=BATCH)).is_success
                async with asyncio.timeout(20):
                    while (await acme.get("/projections")).json()["relay"]["lag_events"]:
                        await asyncio.sleep(0.1)
            settings = nats_settings(server.url, nats_stream="SECOND")
            said = "another stream of this NATS account takes causeway.>: delete it"
            async with relaying(settings, database_url):
                async with asyncio.timeout(20):
                    while not any(said in r.getMessage() for r in caplog.records):
                        await asyncio.sleep(0.1)


class TestMetrics:
    async def test_metrics_show_the_relay_lag_while_nats_refuses_and_zero_after(
        self, database_url: URL, make_key: MakeKey
    ) -> None:
        key = await make_key("acme.eu")
        with nats_servers(1) as server:
            settings = nats_settings(server.url, nats_ack_timeout_s=1, nats_duplicate_window_s=5)
            async with relaying(settings, database_url) as app, asgi_client(app, key) as c:
                sent = [event(type="a..b"), event()]
                assert (await c.post("/events", content=dumps(sent), headers=BATCH)).is_success
                async with asyncio.timeout(20):
                    while (await c.get("/projections")).json()["relay"]["lag_events"]:
                        await asyncio.sleep(0.1)
                text = (await c.get("/metrics")).text
                got = await consume(server.url, "CAUSEWAY", "check", 2, timeout_s=2)
        assert 'causeway_relay_lag_events{stream="CAUSEWAY"} 0.0' in text
        assert [m.subject for m in got] == [
            "causeway.acme%2Eeu.a.%00.b",
            "causeway.acme%2Eeu.com.example.frame.v1",
        ]
        assert [m.headers["Nats-Msg-Id"] for m in got] == [
            f"acme.eu:{orjson.loads(m.data)['position']}" for m in got
        ]
