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


LEADING = 65536 * 16 - 1  # out-of-geometry events before the first one in it


def test_a_wild_first_time_after_a_million_outside_events_costs_one_event(
    tmp_path: Path,
) -> None:
    """The first chunks are held until 8 times in the geometry have come; a hold that
    ended at a million events, fitting or not, started from the one wild time."""
    with np.load(PROPHESEE_NPZ) as archive:
        events, width, height = archive["events"], archive["width"], archive["height"]
    outside = np.repeat(events[:1], LEADING)
    outside["x"] = int(width)  # one column past the sensor: dropped, counted
    outside["t"] = events["t"][0]
    clean = np.concatenate([outside, events[1:]])
    np.savez(tmp_path / "clean.npz", events=clean, width=width, height=height)
    wild = np.concatenate([outside, events])
    wild["t"][LEADING] += HOUR_US  # the first event in the geometry glitched an hour ahead
    np.savez(tmp_path / "wild.npz", events=wild, width=width, height=height)

    _, clean_out = _replay(tmp_path / "clean.npz", tmp_path / "clean.ndjson")
    summary, wild_out = _replay(tmp_path / "wild.npz", tmp_path / "wild.ndjson")

    assert _windows(wild_out) == _windows(clean_out), summary
