"""The bridge against a real ``causeway serve`` (and a real Mosquitto): recordings in,
lineage out, re-runs append nothing, the spool delivers once and in order."""

from __future__ import annotations

import http.server
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import orjson
import pytest
from sqlalchemy import URL
from typer.testing import CliRunner

from evs_bridge.cli import cli
from evs_bridge.mqtt import Broker, MqttBridge, send_packets
from evs_bridge.output import NdjsonSink, Output, StoreSink
from evs_bridge.spool import Spool
from ingest.client import CausewayClient
from tests.integration.process import create_key, environment, free_port, serving
from tests.unit.evs_bridge.scenes import FACE, HEIGHT, PERSON, WIDTH, save_npz, scene

SAMPLES = Path(__file__).parents[2] / "data" / "evs-samples" / "event_camera_codecs"
PROPHESEE_BAG = SAMPLES / "test_data_evt3_trigger" / "test_data_evt3_trigger_0.db3"
MOSQUITTO = Path("/usr/sbin/mosquitto")
LINEAGE = """
query ($id: ID!) {
  lineage(id: $id, direction: UPSTREAM) { nodes { depth event { id type } } edges { cause { id } effect { id } } }
  audit(decisionId: $id) { sourceEvents { id type } chainVerified }
}
"""


@dataclass(frozen=True, slots=True)
class Store:
    base: str
    key: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def fetch_events(self, **filters: str) -> list[dict[str, Any]]:
        response = httpx2.get(f"{self.base}/replay", params=filters, headers=self.auth, timeout=30)
        assert response.status_code == 200, response.text
        return [orjson.loads(line) for line in response.content.splitlines() if line]

    def fetch_graphql(self, query: str, **variables: Any) -> dict[str, Any]:
        response = httpx2.post(
            f"{self.base}/graphql",
            json={"query": query, "variables": variables},
            headers=self.auth,
            timeout=30,
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert "errors" not in body, body
        result: dict[str, Any] = body["data"]
        return result


@pytest.fixture
def store(database_url: URL, tmp_path: Path) -> Iterator[Store]:
    url = database_url.render_as_string(hide_password=False)
    env = environment(CAUSEWAY_DATABASE_URL=url, CAUSEWAY_DATA_DIR=str(tmp_path / "data"))
    key = create_key(env, "edge", "ingest,read")
    with serving(env) as base:
        yield Store(base, key)


def bridge_cli(*arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evs_bridge", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=environment(),
        check=False,
    )


def test_a_replayed_recording_traces_back_to_its_segment(store: Store, tmp_path: Path) -> None:
    arguments = ["replay", str(PROPHESEE_BAG), "--sensor", "gate-1", "--target", store.base]
    first = bridge_cli(*arguments, "--key", store.key, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    stored = store.fetch_events(source="evs://gate-1")
    assert len(stored) == 14
    activity = next(e for e in stored if e["type"] == "evs.activity.detected")
    segment_id = activity["causationid"]
    segment = next(e for e in stored if e["id"] == segment_id)
    assert segment["type"] == "evs.segment.recorded"
    assert segment["position"] < activity["position"]
    assert segment["data"]["events"]["in"] > segment["data"]["events"]["after_background"]
    dataref = segment["data"]["dataref"]
    assert "uri" not in dataref  # the file is named by its content, never its path
    assert segment_id.split(":")[2] == dataref["sha256"][:12]
    assert activity["priority"] == 2  # a "person" at the edge: green

    answer = store.fetch_graphql(LINEAGE, id=activity["id"])
    nodes = {(n["event"]["id"], n["depth"]) for n in answer["lineage"]["nodes"]}
    assert nodes == {(activity["id"], 0), (segment_id, 1)}
    assert answer["lineage"]["edges"] == [
        {"cause": {"id": segment_id}, "effect": {"id": activity["id"]}}
    ]
    assert answer["audit"]["sourceEvents"] == [{"id": segment_id, "type": "evs.segment.recorded"}]
    assert answer["audit"]["chainVerified"] is True

    # The same recording again, under another name in another folder: nothing new.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    copy = shutil.copy(PROPHESEE_BAG, elsewhere / "renamed-gate.db3")
    again = bridge_cli(
        "replay", str(copy), "--sensor", "gate-1", "--target", store.base, "--key", store.key,
        cwd=elsewhere,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "14 sent (14 already stored)" in again.stdout
    assert store.fetch_events() == stored  # same events, same positions, nothing after


def test_events_spooled_while_the_store_is_away_arrive_once_in_order(
    store: Store, tmp_path: Path
) -> None:
    recording = save_npz(tmp_path / "face.npz", scene([FACE, PERSON]))
    expected_file = tmp_path / "expected.ndjson"
    offline = bridge_cli(
        "replay", str(recording), "--sensor", "door", "--out", str(expected_file), cwd=tmp_path
    )
    assert offline.returncode == 0, offline.stderr
    expected = [orjson.loads(line)["id"] for line in expected_file.read_bytes().splitlines()]
    assert len(expected) > 40

    spool = tmp_path / "spool"
    nowhere = f"http://127.0.0.1:{free_port()}"
    down = bridge_cli(
        "replay", str(recording), "--sensor", "door", "--target", nowhere, "--key", store.key,
        "--spool", str(spool), "--drain-timeout-s", "0", cwd=tmp_path,
    )  # fmt: skip
    assert down.returncode == 0, down.stderr
    assert f"{len(expected)} spooled" in down.stdout
    assert "store unavailable" in down.stderr
    assert store.fetch_events() == []

    up = bridge_cli(
        "drain", "--spool", str(spool), "--target", store.base, "--key", store.key, cwd=tmp_path
    )
    assert up.returncode == 0, up.stderr
    stored = store.fetch_events()
    assert [e["id"] for e in stored] == expected
    assert Spool(spool).is_empty

    # Replaying now appends nothing: the spooled run stored exactly these events.
    rerun = bridge_cli(
        "replay", str(recording), "--sensor", "door", "--target", store.base, "--key",
        store.key, "--spool", str(spool), cwd=tmp_path,
    )  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr
    assert store.fetch_events() == stored


def test_events_spooled_under_one_key_are_not_sent_under_another(
    database_url: URL, tmp_path: Path
) -> None:
    """The next run for a sensor sent what its spool held with its own key: on an edge box
    shared by tenants, alpha's spooled camera events were stored in beta's tenant (from a
    review). Another key is refused before anything is sent; the key they are for sends
    them; an empty spool takes any key."""
    url = database_url.render_as_string(hide_password=False)
    env = environment(CAUSEWAY_DATABASE_URL=url, CAUSEWAY_DATA_DIR=str(tmp_path / "data"))
    alpha_key = create_key(env, "alpha", "ingest,read")
    beta_key = create_key(env, "beta", "ingest,read")
    spool = tmp_path / ".causeway-evs" / "spool" / "door"  # the default, for sensor "door"
    alphas = save_npz(tmp_path / "alpha-door.npz", scene([FACE, PERSON]))
    nowhere = f"http://127.0.0.1:{free_port()}"
    down = bridge_cli(
        "replay", str(alphas), "--sensor", "door", "--target", nowhere, "--key", alpha_key,
        "--spool", str(spool), "--drain-timeout-s", "0", cwd=tmp_path,
    )  # fmt: skip
    assert down.returncode == 0, down.stderr
    assert not Spool(spool).is_empty
    with serving(env) as base:
        alpha, beta = Store(base, alpha_key), Store(base, beta_key)
        betas = bridge_cli(
            "replay", str(PROPHESEE_BAG), "--sensor", "door", "--target", base,
            "--key", beta_key, cwd=tmp_path,
        )  # fmt: skip
        assert betas.returncode == 2, betas.stdout
        assert betas.stderr.startswith(
            f"error: {Path('.causeway-evs/spool/door')} holds events spooled under another key"
        ), betas.stderr
        assert beta.fetch_events() == []
        drained = bridge_cli(
            "drain", "--spool", str(spool), "--target", base, "--key", alpha_key, cwd=tmp_path
        )
        assert drained.returncode == 0, drained.stderr
        assert len(alpha.fetch_events()) > 40
        betas = bridge_cli(
            "replay", str(PROPHESEE_BAG), "--sensor", "door", "--target", base,
            "--key", beta_key, cwd=tmp_path,
        )  # fmt: skip
        assert betas.returncode == 0, betas.stderr
        assert {e["correlationid"] for e in beta.fetch_events()}.isdisjoint(
            {e["correlationid"] for e in alpha.fetch_events()}
        )


def test_an_unreachable_store_is_a_usage_error_without_a_spool(tmp_path: Path) -> None:
    result = bridge_cli(
        "replay", str(PROPHESEE_BAG), "--sensor", "s", "--target",
        f"http://127.0.0.1:{free_port()}", "--key", "k", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith("error: cannot reach")


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("http://127.0.0.1:abc", "is not a URL"),  # with a spool: a traceback, exit 1
        ("http://[::1", "is not a URL"),
        ("127.0.0.1:8000", "must be an http:// or https:// URL"),  # spooled for good
        ("ftp://127.0.0.1/", "must be an http:// or https:// URL"),
    ],
)
def test_a_target_that_is_no_store_url_is_one_line_even_with_a_spool(
    tmp_path: Path, target: str, said: str
) -> None:
    result = bridge_cli(
        "replay", str(PROPHESEE_BAG), "--sensor", "s", "--target", target, "--key", "k",
        "--spool", str(tmp_path / "spool"), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-400:]
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: --target"), line
    assert said in line, line


def test_a_recording_published_over_mqtt_reaches_the_store(store: Store, tmp_path: Path) -> None:
    topic = f"causeway-test/evs/{uuid.uuid4().hex}"
    events = scene([FACE])
    with CausewayClient(store.base, store.key) as client:
        output = Output(StoreSink(client), Spool(tmp_path / "spool"))
        bridge = MqttBridge(Broker("127.0.0.1", 1883), topic, "lobby", output)
        bridge.start()
        try:
            assert bridge.subscribed.wait(10), "the bridge never subscribed"
            published = send_packets(
                Broker("127.0.0.1", 1883), topic, [events], width=WIDTH, height=HEIGHT
            )
            deadline = time.monotonic() + 10
            while bridge.stats.processed < published:
                assert time.monotonic() < deadline, bridge.stats
                time.sleep(0.05)
        finally:
            bridge.stop(drain_timeout_s=5)
    assert bridge.stats.dropped == bridge.stats.bad == bridge.stats.gaps == 0
    stored = store.fetch_events(source="evs://lobby")
    assert len(stored) == output.stats.sent == output.stats.queued
    faces = [e for e in stored if e["type"] == "evs.activity.detected"]
    assert faces
    assert {e["data"]["label"] for e in faces} == {"face"}
    assert {e["priority"] for e in faces} == {9}
    segments = {e["id"]: e for e in stored if e["type"] == "evs.segment.recorded"}
    for face in faces:
        segment = segments[face["causationid"]]
        assert segment["data"]["dataref"]["uri"] == f"mqtt://127.0.0.1:1883/{topic}"
        assert segment["data"]["dataref"]["offset_unit"] == "sequence"
    assert any(e["type"] == "evs.activity.sustained" for e in stored)


@pytest.mark.skipif(not MOSQUITTO.exists(), reason="needs the mosquitto binary")
def test_the_bridge_survives_a_broker_restart(tmp_path: Path) -> None:
    port = free_port()

    def start_broker() -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [str(MOSQUITTO), "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while True:  # until it listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return process
            except OSError:
                assert time.monotonic() < deadline, "mosquitto did not start"
                time.sleep(0.05)

    def stop_broker(process: subprocess.Popen[bytes]) -> None:
        process.terminate()
        process.wait(timeout=10)

    broker = Broker("127.0.0.1", port)
    topic = "evs/restart"
    events = scene([FACE], duration_us=100_000)
    out = tmp_path / "out.ndjson"
    process = start_broker()
    with out.open("w") as file:
        bridge = MqttBridge(broker, topic, "yard", Output(NdjsonSink(file)))
        bridge.start()
        try:
            assert bridge.subscribed.wait(10)
            assert send_packets(broker, topic, [events], width=WIDTH, height=HEIGHT) > 0
            stop_broker(process)
            process = start_broker()
            assert bridge.subscribed.wait(15), "no resubscription after the restart"
            later = events.copy()
            later["t"] += 1_000_000
            sent = send_packets(
                broker, topic, [later], width=WIDTH, height=HEIGHT, first_sequence=10_000
            )
            deadline = time.monotonic() + 10
            while bridge.stats.processed < sent + 1:
                assert time.monotonic() < deadline, bridge.stats
                time.sleep(0.05)
        finally:
            bridge.stop()
            stop_broker(process)
    assert bridge.stats.connects == 2
    ids = [orjson.loads(line)["id"] for line in out.read_bytes().splitlines()]
    assert any(":seg:2000000" in i for i in ids)  # a segment from after the restart
    assert np.unique(ids).size == len(ids)


def test_the_mqtt_command_runs_until_sigterm_and_spools_for_an_absent_store(
    tmp_path: Path,
) -> None:
    topic = f"causeway-test/evs/{uuid.uuid4().hex}"
    spool = tmp_path / "spool"
    process = subprocess.Popen(
        [
            sys.executable, "-m", "evs_bridge", "mqtt", "--broker", "mqtt://127.0.0.1:1883",
            "--topic", topic, "--sensor", "dock", "--target", f"http://127.0.0.1:{free_port()}",
            "--key", "k", "--spool", str(spool),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )  # fmt: skip
    try:
        assert process.stderr is not None
        assert process.stderr.readline().startswith("subscribed to mqtt://127.0.0.1:1883/")
        send_packets(Broker("127.0.0.1", 1883), topic, [scene([FACE])], width=WIDTH, height=HEIGHT)
        deadline = time.monotonic() + 30
        while not any(f.stat().st_size for f in spool.glob("*.ndjson")):  # it spooled
            assert time.monotonic() < deadline, "nothing was spooled"
            time.sleep(0.05)
    finally:
        process.terminate()
        stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert "0 dropped" in stdout
    spooled = Spool(spool).read_batch(1000).events
    assert spooled
    assert spooled[0]["type"] == "evs.segment.recorded"
    assert f"{len(spooled)} spooled" in stdout


class _NotFound(http.server.BaseHTTPRequestHandler):
    """A web server that is not Causeway: 404 with a non-Causeway problem for everything."""

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = b'{"type": "about:blank", "title": "Not Found", "status": 404}'
        self.send_response(404)
        self.send_header("content-type", "application/problem+json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:  # the base's name
        pass


@pytest.fixture
def not_causeway() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_target_that_is_not_causeway_is_exit_2(not_causeway: str, tmp_path: Path) -> None:
    arguments = ["replay", str(PROPHESEE_BAG), "--sensor", "s", "--target", not_causeway]
    result = CliRunner().invoke(cli, [*arguments, "--key", "k"])
    assert result.exit_code == 2, result.output
    assert "/healthz answered 404" in result.output
    # With --spool the health check lets a 5xx pass, never a 404.
    spooled = CliRunner().invoke(cli, [*arguments, "--key", "k", "--spool", str(tmp_path / "s")])
    assert spooled.exit_code == 2, spooled.output


def test_a_spool_in_use_or_unwritable_is_exit_2(tmp_path: Path) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    arguments = ["replay", str(PROPHESEE_BAG), "--sensor", "s", "--target", nowhere, "--key", "k"]
    with Spool(tmp_path / "busy"):
        busy = CliRunner().invoke(cli, [*arguments, "--spool", str(tmp_path / "busy")])
    assert busy.exit_code == 2, busy.output
    assert "in use by another bridge" in busy.output
    (tmp_path / "file").write_text("not a directory")
    unwritable = CliRunner().invoke(cli, [*arguments, "--spool", str(tmp_path / "file" / "s")])
    assert unwritable.exit_code == 2, unwritable.output
    assert "cannot use as a spool" in unwritable.output
    assert "Traceback" not in unwritable.output
