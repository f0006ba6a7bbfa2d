"""What `causeway replay --out` writes: an export made private stays private while it is
written again (it was written beside itself with the umask's mode and narrowed after)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import URL
from typer.testing import CliRunner

from app.cli import cli
from tests.integration.app.test_cli import store


def test_replay_over_a_private_export_never_lays_it_open(
    database_url: URL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An export kept 0600 (it holds a tenant's events) is replayed again onto the same
    name. The new content goes to `.<name>.partial`, which was created with the umask's
    mode (0644 under 022) and narrowed to 0600 only after: any local user could open it
    in between and read the whole export as it was written."""
    monkeypatch.setenv("CAUSEWAY_DATABASE_URL", database_url.render_as_string(hide_password=False))
    store(database_url, "acme", 3)
    out = tmp_path / "acme.ndjson"
    out.write_text("")
    out.chmod(0o600)
    modes: list[int] = []
    real_chmod = os.chmod

    def watched_chmod(path: Any, mode: int, **kw: Any) -> None:
        with contextlib.suppress(OSError):
            modes.append(stat.S_IMODE(os.stat(path).st_mode))  # as it lay on disk until now
        real_chmod(path, mode, **kw)

    previous = os.umask(0o022)
    try:
        monkeypatch.setattr(os, "chmod", watched_chmod)
        result = CliRunner().invoke(cli, ["replay", "--tenant", "acme", "--out", str(out)])
    finally:
        os.umask(previous)
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert all(m & 0o077 == 0 for m in modes), (
        f"the export lay on disk with mode {[oct(m) for m in modes]} before it was narrowed"
    )


def test_a_partial_file_left_behind_is_replaced_not_followed(
    database_url: URL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `.<name>.partial` left by a killed replay, even a link to another file, is made
    anew: the export is written to a file of its own, and the link's target is untouched."""
    monkeypatch.setenv("CAUSEWAY_DATABASE_URL", database_url.render_as_string(hide_password=False))
    store(database_url, "acme", 2)
    out = tmp_path / "acme.ndjson"
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("keep me\n")
    (tmp_path / ".acme.ndjson.partial").symlink_to(elsewhere)
    result = CliRunner().invoke(cli, ["replay", "--tenant", "acme", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert elsewhere.read_text() == "keep me\n"
    assert len(out.read_text().splitlines()) == 2
    assert not (tmp_path / ".acme.ndjson.partial").exists()


@pytest.mark.parametrize("exists", [False, True])
def test_a_long_but_valid_file_name_is_written(
    database_url: URL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exists: bool
) -> None:
    """A name of 250 bytes is valid (255 at most), but `.<name>.partial` is 9 bytes longer:
    "File name too long". Such an export is written through a partial file of a short
    name."""
    monkeypatch.setenv("CAUSEWAY_DATABASE_URL", database_url.render_as_string(hide_password=False))
    store(database_url, "acme", 2)
    out = tmp_path / ("r" * 250)
    if exists:
        out.write_text("old")
    result = CliRunner().invoke(cli, ["replay", "--tenant", "acme", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert len(out.read_bytes().splitlines()) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]  # no partial left
