"""``causeway evs``: what a user sees on good and bad input."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from evs_bridge.cli import cli

SAMPLES = Path(__file__).parents[2] / "data" / "evs-samples" / "event_camera_codecs"
NPZ = SAMPLES / "prophesee1280x720_evt3_xypt.npz"
runner = CliRunner()


class TestReplay:
    def test_out_writes_the_events_as_ndjson(self, tmp_path: Path) -> None:
        out = tmp_path / "events.ndjson"
        result = runner.invoke(cli, ["replay", str(NPZ), "--sensor", "cam-1", "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert "82,469 events" in result.output
        events = [orjson.loads(line) for line in out.read_bytes().splitlines()]
        assert events[0]["type"] == "evs.segment.recorded"
        assert {e["source"] for e in events} == {"evs://cam-1"}

    @pytest.mark.parametrize(
        ("arguments", "message"),
        [
            (["missing.npz", "--sensor", "a", "--out", "x"], "no such file"),
            ([str(SAMPLES / "LICENSE"), "--sensor", "a", "--out", "x"], "not a .raw"),
            ([str(NPZ), "--sensor", "a"], "give --target and --key"),
            ([str(NPZ), "--sensor", "a", "--target", "http://h"], "give --target and --key"),
            (
                [str(NPZ), "--sensor", "a", "--out", "x", "--target", "http://h", "--key", "k"],
                "not both",
            ),
            ([str(NPZ), "--sensor", "a,b", "--out", "x"], "sensor id"),
            ([str(NPZ), "--sensor", "a", "--out", "x", "--channel", "face"], "LABEL=NAME"),
            ([str(NPZ), "--sensor", "a", "--out", "x", "--classifier", "no.such:Thing"], "import"),
            ([str(NPZ), "--sensor", "a", "--out", "x", "--window-ms", "0"], "positive"),
        ],
    )
    def test_bad_input_is_one_line_and_exit_2(
        self, arguments: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)
        result = runner.invoke(cli, ["replay", *arguments])
        assert result.exit_code == 2, result.output
        assert message in result.output
        assert "error: " in result.output
        assert "Traceback" not in result.output


def test_inspect_prints_the_summary() -> None:
    result = runner.invoke(cli, ["inspect", str(NPZ)])
    assert result.exit_code == 0, result.output
    assert "1280x720" in result.output
    assert "82,469" in result.output


def test_mqtt_needs_a_target() -> None:
    result = runner.invoke(
        cli, ["mqtt", "--broker", "mqtt://127.0.0.1", "--topic", "t", "--sensor", "s"]
    )
    assert result.exit_code == 2
    assert "give --target and --key" in result.output
