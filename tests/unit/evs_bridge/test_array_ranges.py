"""``.npz``/``.npy`` fields of any integer width are normalised to ``EVENT_DTYPE``
(``p`` polarity 0 or 1, ``x``/``y`` pixels), and the pipeline drops and counts events
outside the geometry. A plain numpy cast wrapped instead: p = -1 became 255 (an "on"
event), x = 65541 became pixel 5 and x = -65529 pixel 7, inside the sensor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from evs_bridge.cli import cli
from evs_bridge.decoders import open_recording

runner = CliRunner()


def _save(path: Path, x: list[int], p: list[int]) -> Path:
    events = np.zeros(len(x), dtype=[("x", "<i4"), ("y", "<i4"), ("p", "i1"), ("t", "<i8")])
    events["x"] = x
    events["y"] = 1
    events["p"] = p
    events["t"] = np.arange(len(x)) * 10 + 10
    np.savez(path, events=events, width=640, height=480)
    return path


def test_a_minus_one_polarity_is_an_off_event_not_255(tmp_path: Path) -> None:
    # -1/+1 polarity is common (MVSEC, EV-IMO and many MATLAB-made sets).
    path = _save(tmp_path / "signed.npz", x=[1, 2, 3, 4, 5, 6], p=[-1, 1, -1, 1, -1, 1])
    [chunk] = list(open_recording(path).chunks())
    assert set(chunk.events["p"].tolist()) <= {0, 1}, chunk.events["p"].tolist()

    result = runner.invoke(cli, ["inspect", str(path)])
    assert result.exit_code == 0, result.output
    assert "6 (3 on)" in result.output, result.output


def test_coordinates_past_65535_are_outside_the_geometry_not_wrapped_into_it(
    tmp_path: Path,
) -> None:
    path = _save(tmp_path / "wide.npz", x=[1, 2, 3, 65536 + 5, 4, -65536 + 7], p=[1] * 6)
    [chunk] = list(open_recording(path).chunks())
    assert chunk.events["x"].tolist() != [1, 2, 3, 5, 4, 7], "wrapped onto real pixels"

    out = tmp_path / "out.ndjson"
    result = runner.invoke(cli, ["replay", str(path), "--sensor", "s", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "2 outside the geometry" in result.output, result.output
