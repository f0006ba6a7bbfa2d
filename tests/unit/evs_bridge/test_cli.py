"""``causeway evs``: what a user sees on good and bad input."""

from __future__ import annotations

import shutil
import sqlite3
import stat
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from evs_bridge.cli import cli
from evs_bridge.events import EVENT_DTYPE
from evs_bridge.regions import Region
from evs_bridge.spool import Spool
from tests.unit.evs_bridge.scenes import FACE, save_npz, scene
from tests.unit.evs_bridge.test_decoders import cd, evt2_word

SAMPLES = Path(__file__).parents[2] / "data" / "evs-samples" / "event_camera_codecs"
NPZ = SAMPLES / "prophesee1280x720_evt3_xypt.npz"
BAG = SAMPLES / "test_data_evt3_trigger" / "test_data_evt3_trigger_0.db3"
runner = CliRunner()


class OverconfidentClassifier:
    def classify(self, region: Region) -> tuple[str, float]:
        return "face", 1.5


class Float32Classifier:
    def classify(self, region: Region) -> tuple[str, float]:
        return "face", np.float32(0.87)  # type: ignore[return-value]  # numpy, as a model gives


def _edit_message(path: Path, index: int, edit: Callable[[bytes], bytes]) -> Path:
    copy = Path(shutil.copy(BAG, path))
    with sqlite3.connect(copy) as db:
        rowid, blob = db.execute(
            "SELECT id, data FROM messages ORDER BY timestamp, id LIMIT 1 OFFSET ?", (index,)
        ).fetchone()
        db.execute("UPDATE messages SET data = ? WHERE id = ?", (edit(blob), rowid))
    return copy


def truncated_blob(tmp_path: Path) -> Path:
    return _edit_message(tmp_path / "trunc.db3", 3, lambda blob: blob[:30])


def overlong_events(tmp_path: Path) -> Path:
    def lengthen(blob: bytes) -> bytes:
        # The events length is the last u32 field: the one whose bytes end the message.
        body = blob[4:]
        for position in range(len(body) - 4, 0, -1):
            (length,) = struct.unpack_from("<I", body, position)
            if position % 4 == 0 and position + 4 + length == len(body):
                return (
                    blob[:4]
                    + body[:position]
                    + struct.pack("<I", length + 32)
                    + body[position + 4 :]
                )
        raise AssertionError("no events length found")

    return _edit_message(tmp_path / "long.db3", 5, lengthen)


def corrupt_sqlite(tmp_path: Path) -> Path:
    path = tmp_path / "corrupt.db3"
    path.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 64)
    return path


def garbage_aedat(tmp_path: Path) -> Path:
    path = tmp_path / "garbage.aedat4"
    path.write_bytes(b"#!AER-DAT4.0\r\n" + b"\xff" * 300)
    return path


def cut_aedat(tmp_path: Path) -> Path:
    # The magic, then a header length of 0: the Rust decoder panicked (a traceback).
    path = tmp_path / "cut.aedat4"
    path.write_bytes(b"#!AER-DAT4.0\r\n" + b"\x00" * 8)
    return path


def pk_not_zip(tmp_path: Path) -> Path:
    path = tmp_path / "fake.npz"
    path.write_bytes(b"PK\x03\x04 this is no zip archive")
    return path


def huge_coordinates(tmp_path: Path) -> Path:
    # Four events, one at pixel 65535: the filters would allocate a cell per pixel.
    events = np.zeros(4, dtype=EVENT_DTYPE)
    events["x"][3] = events["y"][3] = 65535
    events["t"] = [1, 2, 3, 4]
    path = tmp_path / "huge.npy"
    np.save(path, events)
    return path


def huge_header(tmp_path: Path) -> Path:
    path = tmp_path / "huge.raw"
    path.write_bytes(b"% format EVT3;height=100000;width=100000\n% end\n" + b"\x00" * 64)
    return path


def endless_header(tmp_path: Path) -> Path:
    path = tmp_path / "endless.raw"
    path.write_bytes(b"% evt 3.0" + b"x" * (70 << 10))  # no newline: once read whole
    return path


def wide_npz(tmp_path: Path) -> Path:
    path = tmp_path / "wide.npz"
    events = np.zeros(2, dtype=EVENT_DTYPE)
    np.savez(path, events=events, width=np.array([640, 480]), height=np.array(480))
    return path


def float_npz(tmp_path: Path) -> Path:
    path = tmp_path / "floats.npz"
    events = np.zeros(2, dtype=[("x", "f8"), ("y", "f8"), ("p", "f8"), ("t", "f8")])
    events["x"][0], events["t"][1] = np.inf, np.nan
    np.savez(path, events=events, width=640, height=480)
    return path


def bad_deflate(tmp_path: Path) -> Path:
    path = tmp_path / "deflate.npz"
    events = np.zeros(50_000, dtype=EVENT_DTYPE)
    events["t"] = np.arange(50_000)
    np.savez_compressed(path, events=events)
    data = bytearray(path.read_bytes())
    data[100:400] = bytes(b ^ 0x5A for b in data[100:400])  # inside the deflate stream
    path.write_bytes(data)
    return path


BAD_FILES = {
    "truncated CDR blob": (truncated_blob, "message 3: truncated"),
    "events longer than the blob": (overlong_events, "message 5: events length"),
    "corrupt sqlite": (corrupt_sqlite, "not a readable rosbag2"),
    "garbage aedat4": (garbage_aedat, "not a readable AEDAT 4"),
    "aedat4 cut off in its header": (cut_aedat, "cut off in its header"),
    "PK but no zip": (pk_not_zip, "not a readable .npz"),
    "coordinates past the largest sensor": (huge_coordinates, "outside 0-8192 pixels a side"),
    "a header past the largest sensor": (huge_header, "outside 0-8192 pixels a side"),
    "a header line with no end": (endless_header, "over 64 KiB"),
    "a width that is no number": (wide_npz, "width and height must each be one integer"),
    "float coordinates": (float_npz, "fields x, y, p, t must be integers"),
    "a deflate stream that does not inflate": (bad_deflate, "Error -3 while decompressing"),
}


class TestReplay:
    def test_a_partial_file_left_behind_is_replaced_not_followed(self, tmp_path: Path) -> None:
        """A `.<name>.partial` left behind (a killed replay), even a link to another file,
        is replaced: it was opened through the link, and the export overwrote that file
        (and then the link took the export's name), as `causeway replay --out` never did."""
        precious = tmp_path / "precious.txt"
        precious.write_text("precious\n")
        out = tmp_path / "out.ndjson"
        (tmp_path / ".out.ndjson.partial").symlink_to(precious)
        result = runner.invoke(cli, ["replay", str(NPZ), "--sensor", "cam-1", "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert precious.read_text() == "precious\n"
        assert not out.is_symlink()
        assert orjson.loads(out.read_bytes().splitlines()[0])["source"] == "evs://cam-1"

    def test_a_long_but_valid_file_name_is_written(self, tmp_path: Path) -> None:
        """`.<name>.partial` is 9 bytes longer than a name the folder takes (255)."""
        out = tmp_path / ("e" * 244 + ".ndjson")
        result = runner.invoke(cli, ["replay", str(NPZ), "--sensor", "cam-1", "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]  # no partial left

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
            ([str(NPZ), "--sensor", "a", "--out", "x", "--window-ms", str(10**12)], "an hour"),
            ([str(NPZ), "--sensor", "a", "--out", "x", "--dt-us", "0"], "--dt-us must be positive"),
            ([str(NPZ), "--sensor", "a", "--out", "x", "--run", "a/b"], "--run 'a/b' must be"),
            (
                [
                    str(NPZ),
                    "--sensor",
                    "a",
                    "--out",
                    "x",
                    "--channel",
                    "face=red:9",
                    "--channel",
                    "face=green:1",
                ],
                "channel 'face' is given twice",
            ),
            ([str(NPZ), "--sensor", "a", "--out", "x", "--classifier", "..:X"], "dotted path"),
            (
                [
                    str(NPZ),
                    "--sensor",
                    "a",
                    "--out",
                    "x",
                    "--classifier",
                    "evs_bridge.windows:Window",
                ],
                "with no arguments",
            ),
            ([str(NPZ), "--sensor", "a", "--target", "http://h", "--key", "\u00e9"], "--key must"),
            ([str(NPZ), "--sensor", "a", "--target", "http://h", "--key", ""], "--key must"),
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

    @pytest.mark.parametrize("case", sorted(BAD_FILES))
    @pytest.mark.parametrize("command", ["replay", "inspect"])
    def test_a_broken_recording_is_one_line_and_exit_2(
        self, case: str, command: str, tmp_path: Path
    ) -> None:
        make, message = BAD_FILES[case]
        path = make(tmp_path)
        arguments = [str(path)]
        if command == "replay":
            arguments += ["--sensor", "a", "--out", str(tmp_path / "out.ndjson")]
        result = runner.invoke(cli, [command, *arguments])
        assert result.exit_code == 2, result.output
        assert "error: " in result.output
        assert message in result.output
        assert "Traceback" not in result.output

    @pytest.mark.parametrize(
        "failing",
        [
            ["--run", "a/b"],  # refused before the replay starts
            ["--classifier", f"{__name__}:OverconfidentClassifier"],  # half way through
        ],
    )
    def test_a_failed_replay_leaves_what_out_held(self, failing: list[str], tmp_path: Path) -> None:
        recording = save_npz(tmp_path / "face.npz", scene([FACE]))
        out = tmp_path / "events.ndjson"
        out.write_bytes(b'{"kept": true}\n')
        argv = ["replay", str(recording), "--sensor", "a", "--out", str(out), *failing]
        result = runner.invoke(cli, argv)
        assert result.exit_code == 2, result.output
        assert out.read_bytes() == b'{"kept": true}\n'
        assert sorted(p.name for p in tmp_path.iterdir()) == ["events.ndjson", "face.npz"]

    def test_out_keeps_a_files_permissions_and_writes_through_a_symlink(
        self, tmp_path: Path
    ) -> None:
        private = tmp_path / "private.ndjson"
        private.write_bytes(b"old\n")
        private.chmod(0o600)
        link = tmp_path / "link.ndjson"
        link.symlink_to(private)
        for out in (private, link):
            result = runner.invoke(cli, ["replay", str(NPZ), "--sensor", "a", "--out", str(out)])
            assert result.exit_code == 0, result.output
            assert b"evs.segment.recorded" in private.read_bytes()
        assert (stat.S_IMODE(private.stat().st_mode), link.is_symlink()) == (0o600, True)

    def test_a_classifier_answering_out_of_range_is_exit_2(self, tmp_path: Path) -> None:
        recording = save_npz(tmp_path / "face.npz", scene([FACE]))
        result = runner.invoke(
            cli,
            [
                "replay", str(recording), "--sensor", "a", "--out", str(tmp_path / "o"),
                "--classifier", f"{__name__}:OverconfidentClassifier",
            ],
        )  # fmt: skip
        assert result.exit_code == 2, result.output
        assert "error: " in result.output
        assert "not a number in [0, 1]" in result.output

    def test_a_numpy_confidence_is_coerced(self, tmp_path: Path) -> None:
        recording = save_npz(tmp_path / "face.npz", scene([FACE]))
        out = tmp_path / "o.ndjson"
        result = runner.invoke(
            cli,
            [
                "replay", str(recording), "--sensor", "a", "--out", str(out),
                "--classifier", f"{__name__}:Float32Classifier",
            ],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        events = [orjson.loads(line) for line in out.read_bytes().splitlines()]
        confidences = {e["data"]["confidence"] for e in events if "confidence" in e["data"]}
        assert confidences == {0.87}

    def test_events_outside_the_geometry_are_counted_in_the_summary(self, tmp_path: Path) -> None:
        events = scene([FACE])
        events["x"][::100] = 400  # the npz says 320 wide
        recording = save_npz(tmp_path / "wide.npz", events)
        result = runner.invoke(
            cli, ["replay", str(recording), "--sensor", "a", "--out", str(tmp_path / "o")]
        )
        assert result.exit_code == 0, result.output
        assert f"{len(events[::100]):,} outside the geometry" in result.output

    def test_evt_events_outside_the_geometry_are_counted_too(self, tmp_path: Path) -> None:
        words = [evt2_word(8, 10), cd(1, 5, 3, 4), cd(0, 1, 640, 0), cd(0, 9, 2, 480)]
        recording = tmp_path / "wide.raw"
        recording.write_bytes(
            b"% evt 2.0\n% geometry 640x480\n% end\n" + np.array(words, dtype="<u4").tobytes()
        )
        result = runner.invoke(
            cli, ["replay", str(recording), "--sensor", "a", "--out", str(tmp_path / "o")]
        )
        assert result.exit_code == 0, result.output
        assert "2 outside the geometry" in result.output

    def test_the_numba_backend_runs_with_4_neighbours(self, tmp_path: Path) -> None:
        outs = []
        for backend in ("numpy", "numba"):
            out = tmp_path / f"{backend}.ndjson"
            result = runner.invoke(
                cli,
                [
                    "replay", str(NPZ), "--sensor", "a", "--out", str(out),
                    "--filter-backend", backend, "--neighbourhood", "4",
                ],
            )  # fmt: skip
            assert result.exit_code == 0, result.output
            outs.append(out.read_bytes())
        assert outs[0] == outs[1]
        assert b'"after_background"' in outs[0]

    @pytest.mark.parametrize(
        ("option", "message"),
        [
            (["--filter-backend", "numba"], "numba package"),
            (["--filter-backend", "cuda"], "numpy or numba"),
            (["--neighbourhood", "6"], "4 or 8"),
        ],
    )
    def test_a_backend_that_cannot_run_is_exit_2(
        self, option: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setitem(sys.modules, "numba", None)
        result = runner.invoke(
            cli, ["replay", str(NPZ), "--sensor", "a", "--out", str(tmp_path / "o"), *option]
        )
        assert result.exit_code == 2, result.output
        assert message in result.output
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


def test_mqtt_refuses_a_wildcard_topic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(
        cli,
        [
            "mqtt", "--broker", "mqtt://127.0.0.1", "--topic", "sensors/#", "--sensor", "s",
            "--target", "http://127.0.0.1:1", "--key", "k", "--spool", str(tmp_path / "sp"),
        ],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "without + or #" in result.output


def test_drain_names_a_changed_spool_line(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    spool.append([{"id": "e0"}, {"id": "e1"}])
    spool.close()
    [segment] = (tmp_path / "spool").glob("spool-*.ndjson")
    segment.write_bytes(b"this is not json\n")
    result = runner.invoke(
        cli,
        ["drain", "--spool", str(tmp_path / "spool"), "--target", "http://127.0.0.1:1",
         "--key", "k", "--timeout-s", "0"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "is not JSON" in result.output
    assert "Traceback" not in result.output


def test_mqtt_refuses_a_queue_of_no_packets() -> None:
    result = runner.invoke(
        cli,
        ["mqtt", "--broker", "mqtt://127.0.0.1", "--topic", "t", "--sensor", "s",
         "--target", "http://127.0.0.1:1", "--key", "k", "--queue-packets", "0"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "--queue-packets must be at least 1" in result.output


def test_a_usage_error_of_python_m_evs_bridge_is_one_line() -> None:
    # As under `causeway evs`: click's framed box took six lines.
    done = subprocess.run(
        [sys.executable, "-m", "evs_bridge", "inspect"], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stderr) == (2, "error: Missing argument 'FILE'.\n")


@pytest.mark.parametrize("seconds", ["inf", "nan", "-1"])
def test_drain_gives_up_after_a_finite_time(seconds: str, tmp_path: Path) -> None:
    argv = ["drain", "--timeout-s", seconds, "--spool", str(tmp_path), "--target", "http://h"]
    result = runner.invoke(cli, [*argv, "--key", "k"])  # inf waited for ever
    assert result.exit_code == 2, result.output
    assert "--timeout-s" in result.output


@pytest.mark.parametrize("how", ["same path", "a link"])
def test_out_naming_the_recording_refuses_rather_than_replace_it(tmp_path: Path, how: str) -> None:
    """The recording is what every segment's dataref (its SHA-256) names: `--out` onto it
    exited 0 having replaced it with the NDJSON (from a review)."""
    recording = Path(shutil.copy(NPZ, tmp_path / "gate.npz"))
    out = recording
    if how == "a link":
        out = tmp_path / "out.ndjson"
        out.symlink_to(recording)
    before = recording.read_bytes()
    result = runner.invoke(cli, ["replay", str(recording), "--sensor", "gate", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert (
        result.output == f"error: {out}: is the recording being replayed; give --out another file\n"
    )
    assert recording.read_bytes() == before


def test_drain_without_a_target_names_only_options_drain_has(tmp_path: Path) -> None:
    """It said "give --target and --key (or --out FILE)"; drain has no --out (a review)."""
    result = runner.invoke(cli, ["drain", "--spool", str(tmp_path)])
    assert (result.exit_code, result.output) == (2, "error: give --target and --key\n")
