"""One wild timestamp at the start of a recording costs one event (docs/evs-bridge.md,
"What is admitted"), as one anywhere else does. The first event was the reference the
outlier rule measured from: when it was the wild one, every later event was "behind" it,
and the cutter folded every one of them into the wild segment an hour ahead, which stayed
open, growing, until the file ended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
from typer.testing import CliRunner

from evs_bridge.cli import cli
from tests.integration.evs_bridge.test_bridge import SAMPLES

PROPHESEE_NPZ = SAMPLES / "prophesee1280x720_evt3_xypt.npz"
HOUR_US = 3_600_000_000
runner = CliRunner()


def _replay(path: Path, out: Path) -> tuple[str, list[dict[str, Any]]]:
    result = runner.invoke(cli, ["replay", str(path), "--sensor", "gate-1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return result.output, [orjson.loads(line) for line in out.read_bytes().splitlines()]


def _windows(events: list[dict[str, Any]]) -> list[int]:
    return [e["data"]["window"]["start_us"] for e in events if e["type"] == "evs.segment.recorded"]


def test_a_wild_first_timestamp_costs_one_event_not_the_recording(tmp_path: Path) -> None:
    with np.load(PROPHESEE_NPZ) as archive:
        events, width, height = archive["events"], archive["width"], archive["height"]
    clean_path = tmp_path / "clean.npz"
    np.savez(clean_path, events=events[1:], width=width, height=height)
    wild = events.copy()
    wild["t"][0] += HOUR_US  # the first event's clock glitched an hour ahead
    wild_path = tmp_path / "wild.npz"
    np.savez(wild_path, events=wild, width=width, height=height)

    _, clean = _replay(clean_path, tmp_path / "clean.ndjson")
    summary, glitched = _replay(wild_path, tmp_path / "wild.ndjson")

    assert _windows(glitched) == _windows(clean)
    assert "1 with outlier times" in summary, summary
