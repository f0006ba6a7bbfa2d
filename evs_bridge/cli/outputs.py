"""Where a command's events go: the store, through a spool, or an NDJSON file
(``--out``). Refuses, before anything is sent, a store that cannot be reached (unless a spool
is given), a ``/healthz`` other than 200, a key that is no API key, and a spool in use or
that cannot be written. An ``--out`` file is replaced only when the command succeeds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import httpx2

from evs_bridge.cli.options import DEFAULT_SPOOL, fail
from evs_bridge.output import NdjsonSink, Output, OutputConfig, Sink, StoreRefused, StoreSink
from evs_bridge.spool import OWNER_FILE, Spool, SpoolBusy, SpoolCorrupt
from ingest.client import CausewayClient


@contextmanager
def open_output(
    target: str | None,
    key: str | None,
    out: Path | None,
    spool: Path | None,
    spool_mb: int,
    sensor: str,
    config: OutputConfig,
) -> Iterator[Output]:
    if out is not None:
        if target is not None or key is not None:
            fail("give either --out or --target/--key, not both")
        with _written(out) as file:
            yield Output(NdjsonSink(file), None, config)
        return
    if target is None or key is None:
        fail("give --target and --key (or --out FILE)")
    if not key or not key.isascii() or not key.isprintable() or " " in key:
        fail("--key must be an API key: printable ASCII, no spaces")
    _check_url(target)
    status = _fetch_health(target)
    if status is None and spool is None:
        fail(f"cannot reach {target} (give --spool DIR to keep events until it answers)")
    if status is not None and status != 200 and not (status >= 500 and spool is not None):
        fail(f"{target}/healthz answered {status}, not 200: is --target a Causeway store?")
    directory = spool if spool is not None else DEFAULT_SPOOL / sensor
    try:
        opened = Spool(directory, max_bytes=spool_mb << 20)
    except SpoolBusy as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{directory}: cannot use as a spool: {exc.strerror or exc}")
    _claim(opened, key)
    with CausewayClient(target, key, timeout_s=10.0) as client:
        sink: Sink = StoreSink(client)
        try:
            yield Output(sink, opened, config)
        except StoreRefused as exc:
            fail(f"{exc} (events kept in {directory})")
        except SpoolCorrupt as exc:
            fail(str(exc))
        except OSError as exc:  # the spool cannot be written: a full disk, say
            fail(f"{directory}: cannot write the spool: {exc.strerror or exc}", 1)
        finally:
            opened.close()


def _claim(spool: Spool, key: str) -> None:
    """Make ``spool`` this key's; exit 2 when it holds events spooled under another key
    (``Spool.claim``), which this run would have sent as its own: a key is one tenant's."""
    try:
        held = spool.claim({"key": hashlib.sha256(key.encode()).hexdigest()[:16]})
    except OSError as exc:
        spool.close()
        fail(f"{spool.directory}: cannot use as a spool: {exc.strerror or exc}")
    if held is not None:
        spool.close()
        fail(
            f"{spool.directory} holds events spooled under another key: send them with that "
            f"key (causeway evs drain --spool {spool.directory}), or give another --spool; "
            f"delete {spool.directory}/{OWNER_FILE} only if this key may send them"
        )


@contextmanager
def _written(out: Path) -> Iterator[TextIO]:
    """``out`` opened for the events. A regular file (or a new one) is written beside
    itself, with its permissions, and renamed onto ``out`` only when the command
    succeeds: a replay that fails (a recording that cannot be decoded, a full disk) leaves
    what ``out`` held as it was. Anything else is written through: a symlink (``/dev/stdout``
    is one, to what the shell redirected), a pipe, a device. The same rules as ``causeway
    replay --out`` (``app.cli``), which the bridge, an HTTP client of the store, does not
    import."""
    if out.is_dir():
        fail(f"{out}: is a directory")
    try:
        found = os.lstat(out)
    except FileNotFoundError:
        found = None
    except OSError as exc:
        fail(f"{out}: {exc.strerror or exc}")
    through = found is not None and not stat.S_ISREG(found.st_mode)
    target = out if through else _partial_of(out)
    try:
        if through:
            file = target.open("w", encoding="utf-8")
        else:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()  # left by a replay that was killed; never followed (a link)
            mode = stat.S_IMODE(found.st_mode) if found is not None else 0o666
            descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            file = os.fdopen(descriptor, "w", encoding="utf-8")
    except OSError as exc:
        fail(f"{out}: {exc.strerror or exc}")
    try:
        try:
            with file:
                if found is not None and not through:
                    os.chmod(target, stat.S_IMODE(found.st_mode))
                yield file
            if not through:
                target.replace(out)
        except OSError as exc:  # a full disk, as the file is written or closed
            fail(f"writing {out}: {exc.strerror or exc}", 1)
    except BaseException:
        if not through:
            target.unlink(missing_ok=True)
        raise


def _partial_of(out: Path) -> Path:
    """``.NAME.partial`` beside ``out``, or, where that would pass the longest name the
    folder takes, a name made of a digest of NAME (the same for the same target)."""
    name = f".{out.name}.partial"
    try:
        longest = os.pathconf(out.parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        longest = 255
    if len(os.fsencode(name)) > longest:
        name = f".{hashlib.sha256(os.fsencode(out.name)).hexdigest()[:32]}.partial"
    return out.with_name(name)


def _check_url(target: str) -> None:
    """Exit 2 with one line unless ``target`` is an http(s) URL with a host: one that is
    not was taken for a store that does not answer, and with a spool went on to a
    traceback (a bad port), or spooled what could never be sent (no scheme)."""
    try:
        url = httpx2.URL(target)
    except httpx2.InvalidURL as exc:
        fail(f"--target {target!r} is not a URL: {exc}")
    if url.scheme not in ("http", "https") or not url.host:
        fail(f"--target must be an http:// or https:// URL of a Causeway store, got {target!r}")


def _fetch_health(target: str) -> int | None:
    """The status ``/healthz`` answers with, or None when nothing answers."""
    try:
        return httpx2.get(f"{target.rstrip('/')}/healthz", timeout=5.0).status_code
    except (httpx2.TransportError, httpx2.InvalidURL, httpx2.UnsupportedProtocol):
        return None
