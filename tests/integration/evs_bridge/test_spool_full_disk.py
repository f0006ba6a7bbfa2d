"""What the bridge does when writing its spool fails (a full disk): the spool keeps what
it held and takes what comes once there is room, and the MQTT bridge stops saying why
rather than its worker thread ending alone; `replay` on a full disk names the spool, not
the recording. An event smaller than a file buffer (every lineage event the bridge makes)
left its part in the spool: the buffered file's truncate wrote the buffer out first, failed
again, and the next event followed a half line (from a review).

The disk is made "full" for one child process with RLIMIT_FSIZE (writes past the limit
fail with EFBIG, like ENOSPC; SIGXFSZ ignored), then "freed" by raising the limit again.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from tests.integration.evs_bridge.test_bridge import (  # noqa: F401
    SAMPLES,
    Store,
    bridge_cli,
    store,
)
from tests.integration.process import environment, free_port

_FILL_THEN_FREE = textwrap.dedent(
    """
    import resource, signal, sys
    from pathlib import Path
    from evs_bridge.spool import Spool

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    directory, pad = Path(sys.argv[1]), int(sys.argv[2])

    def event(i, pad=10):
        return {"specversion": "1.0", "id": f"review-{i}", "source": "evs://review",
                "type": "evs.review", "datacontenttype": "application/json",
                "data": {"pad": "x" * pad}}

    spool = Spool(directory)
    spool.append([event(1)])                       # spooled
    size = (directory / "spool-000000000001.ndjson").stat().st_size
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, hard))  # the disk fills up
    try:
        spool.append([event(2, pad=pad)])          # refused: OSError, the caller knows
    except OSError as exc:
        print("append 2 failed:", exc)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))        # space again
    spool.append([event(3)])                       # spooled: append returned normally
    spool.close()
    """
)


# Larger than a file buffer (8 KiB), and smaller: a lineage event is 600-900 bytes.
@pytest.mark.parametrize("pad", [20_000, 500], ids=["large", "small"])
def test_a_failed_spool_append_does_not_corrupt_the_events_spooled_after_it(
    store: Store,  # noqa: F811
    tmp_path: Path,
    pad: int,
) -> None:
    spool = tmp_path / "spool"
    child = subprocess.run(
        [sys.executable, "-c", _FILL_THEN_FREE, str(spool), str(pad)],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment(),
        check=False,
    )
    assert child.returncode == 0, child.stderr
    assert "append 2 failed" in child.stdout

    # Events 1 and 3 were acknowledged as spooled; 2 was refused with an error.
    drained = bridge_cli(
        "drain", "--spool", str(spool), "--target", store.base, "--key", store.key, cwd=tmp_path
    )
    stored = [e["id"] for e in store.fetch_events(source="evs://review")]
    assert drained.returncode == 0, drained.stderr
    assert stored == ["review-1", "review-3"]


_MQTT_WORKER = textwrap.dedent(
    """
    import json, resource, signal, sys, time
    from pathlib import Path
    import numpy as np
    from evs_bridge.events import EVENT_DTYPE
    from evs_bridge.mqtt import Broker, MqttBridge, encode_packet
    from evs_bridge.output import Output, OutputConfig, StoreSink
    from evs_bridge.spool import Spool
    from ingest.client import CausewayClient

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    spool_dir, port = Path(sys.argv[1]), int(sys.argv[2])

    def packet(sequence):  # sparse noise: segment events only (green, flushed by poll)
        rng = np.random.default_rng(sequence)
        events = np.zeros(200, dtype=EVENT_DTYPE)
        events["x"] = rng.integers(0, 320, 200)
        events["y"] = rng.integers(0, 240, 200)
        events["t"] = np.sort(rng.integers(sequence * 50_000, (sequence + 1) * 50_000, 200))
        return encode_packet(events, width=320, height=240, sequence=sequence)

    def wait_for(condition, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not condition():
            time.sleep(0.01)
        return condition()

    client = CausewayClient(f"http://127.0.0.1:{port}", "k", timeout_s=2)  # store away
    config = OutputConfig(soon_interval_s=0.01, lazy_interval_s=0.01, retry_min_s=0.01,
                          retry_max_s=0.05, on_full="drop")
    output = Output(StoreSink(client), Spool(spool_dir), config)
    bridge = MqttBridge(Broker("127.0.0.1", port), "review/evs", "review", output)
    bridge.start()
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (3000, hard))  # the disk fills up
    sequence = 0
    for _ in range(30):
        bridge.submit(packet(sequence))
        sequence += 1
        wait_for(lambda: bridge.stats.processed >= sequence or bridge.failure, 2.0)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # space again
    before = bridge.stats.processed
    for _ in range(10):
        bridge.submit(packet(sequence))
        sequence += 1
    went_on = wait_for(lambda: bridge.stats.processed > before or bridge.failure, 10.0)
    print(json.dumps({"before": before, "after": bridge.stats.processed,
                      "failure": repr(bridge.failure), "went_on": bool(went_on),
                      "received": bridge.stats.received}))
    sys.stdout.flush()
    import os; os._exit(0)  # do not run stop(): the point is what happens while running
    """
)


def test_a_spool_write_error_does_not_silently_stop_the_mqtt_worker(tmp_path: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", _MQTT_WORKER, str(tmp_path / "spool"), str(free_port())],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment(),
        check=False,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    result = orjson.loads(child.stdout.strip().splitlines()[-1])
    # Once the disk has room again, the bridge must go on with the packets it receives,
    # or say it stopped (failure set, so `causeway evs mqtt` exits). Neither happened:
    assert result["went_on"], (
        f"worker gone: {result['received']} packets received, processed stuck at "
        f"{result['before']}, failure {result['failure']}; "
        f"stderr tail: {child.stderr.strip().splitlines()[-1] if child.stderr.strip() else ''}"
    )


_REPLAY_WITH_A_FULL_DISK = textwrap.dedent(
    """
    import resource, runpy, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (3000, hard))  # room for a few events only
    sys.argv = ["evs_bridge", *sys.argv[1:]]
    runpy.run_module("evs_bridge", run_name="__main__")
    """
)


def test_a_full_disk_during_replay_names_the_spool_and_exits_1(tmp_path: Path) -> None:
    """It said ``error: <the recording>: [Errno 27] File too large``, exit 2: a broken
    recording, to the user."""
    spool = tmp_path / "spool"
    nowhere = f"http://127.0.0.1:{free_port()}"
    bag = SAMPLES / "test_data_libcaer_rollover" / "libcaer_rollover_0.db3"
    child = subprocess.run(
        [
            sys.executable, "-c", _REPLAY_WITH_A_FULL_DISK,
            "replay", str(bag), "--sensor", "cam", "--target", nowhere, "--key", "k",
            "--spool", str(spool), "--lazy-interval-s", "0", "--drain-timeout-s", "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=environment(),
        check=False,
    )  # fmt: skip
    last = child.stderr.strip().splitlines()[-1]
    # docs/evs-bridge.md: "`replay` and `drain` then stop with
    # `error: <spool>: cannot write the spool: ...` (exit 1)".
    assert child.returncode == 1, child.stderr
    assert last.startswith(f"error: {spool}: cannot write the spool"), child.stderr
