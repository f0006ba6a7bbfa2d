"""A bounded on-disk queue for lineage events the store could not take yet.

When the store is unreachable the bridge must neither lose events nor send them out of
order (a cause must be stored before its effects), so they wait here and are sent oldest
first when the store answers again. The format is plain enough to read with ``cat``::

    <directory>/
      spool-000000000001.ndjson   segment files: one CloudEvent (JSON) per line, in order
      spool-000000000002.ndjson   a new file starts when the current one passes segment_bytes
      cursor                      "<segment number> <byte offset>": the first line not yet
                                  stored; written to a temporary file, fsync'd, renamed
      rejected.ndjson             events the store refused (4xx):
                                  {"status": 422, "problem": {...}, "event": {...}} per line,
                                  up to max_rejected_bytes (16 MiB); later rejects are only
                                  counted (``reject`` returns False) and logged by the caller
      lock                        held with an exclusive ``flock`` while the spool is open:
                                  a second process (or a second ``Spool``) is refused

Files are only appended to, and every append is flushed and ``fsync``'d before it returns.
A crash can leave a torn last line, which is cut off on the next open (its event was never
acknowledged as spooled). A crash between "stored" and "cursor written" re-sends a few
events: the store answers an exact re-send with its stored position, so nothing is stored
twice. Segment files wholly behind the cursor are deleted. The spool is bounded by
``max_bytes`` of unsent lines; ``append`` raises ``SpoolFull`` rather than grow past it.
Two writers would interleave lines and race on the cursor, so opening takes the lock and
raises ``SpoolBusy`` when another holder has it; ``close`` releases it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

DEFAULT_MAX_BYTES = 256 << 20
DEFAULT_SEGMENT_BYTES = 8 << 20
_PREFIX = "spool-"
_SUFFIX = ".ndjson"
CURSOR_FILE = "cursor"
REJECTED_FILE = "rejected.ndjson"
LOCK_FILE = "lock"
OWNER_FILE = "owner"
DEFAULT_MAX_REJECTED_BYTES = 16 << 20


class SpoolFull(Exception):
    """Appending would take the spool past ``max_bytes``."""


class SpoolBusy(Exception):
    """Another process (or another ``Spool`` object) has the spool open."""


class SpoolCorrupt(ValueError):
    """A whole line of a segment is not JSON: changed on disk, not torn by a crash (a torn
    last line has no newline, and is cut off when the spool opens)."""


@dataclass(frozen=True, slots=True)
class SpoolBatch:
    """Events read from the spool, and the cursor after each of them."""

    events: list[dict[str, Any]]
    cursors: list[tuple[int, int]]


class Spool:
    def __init__(
        self,
        directory: Path,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        max_rejected_bytes: int = DEFAULT_MAX_REJECTED_BYTES,
    ) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.max_rejected_bytes = max_rejected_bytes
        self._segment_bytes = segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self._lock: int | None = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(self._lock)
            self._lock = None
            raise SpoolBusy(f"spool {directory} is in use by another bridge") from exc
        self._cursor = self._load_cursor()
        self._repair_tail()
        self._drop_finished()
        self._pending_bytes = self._count_pending()

    def close(self) -> None:
        """Release the lock (closing twice is fine)."""
        lock = getattr(self, "_lock", None)  # None too when __init__ failed before locking
        if lock is not None:
            os.close(lock)  # closing the descriptor releases the flock
            self._lock = None

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    @property
    def pending_bytes(self) -> int:
        """Bytes of spooled events not yet stored."""
        return self._pending_bytes

    def claim(self, owner: dict[str, str]) -> dict[str, Any] | None:
        """Make ``owner`` (the key its events are sent with) the spool's, unless
        events spooled for another are still pending: then that owner (``{}`` for an owner
        file that cannot be read), and nothing changes. Those events were sent with
        whatever key the next run had: another tenant's, on a shared edge box."""
        path = self.directory / OWNER_FILE
        try:
            held = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            held = None
        except (OSError, ValueError):
            held = {}
        if held == owner:
            return None
        if held is not None and self.pending_bytes > 0:
            return held if isinstance(held, dict) else {}
        temporary = self.directory / f"{OWNER_FILE}.tmp"
        with temporary.open("wb") as file:
            file.write(orjson.dumps(owner))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        _fsync_directory(self.directory)
        return None

    def _count_pending(self) -> int:
        total = 0
        for number in self._segments():
            size = self._path(number).stat().st_size
            if number == self._cursor[0]:
                size -= self._cursor[1]
            if number >= self._cursor[0]:
                total += size
        return total

    @property
    def is_empty(self) -> bool:
        return self.pending_bytes == 0

    def append(self, events: list[dict[str, Any]]) -> None:
        """Write ``events`` after everything spooled so far, durably, or raise ``SpoolFull``."""
        if not events:
            return
        payload = b"".join(orjson.dumps(e) + b"\n" for e in events)
        # An empty spool takes any one append, so a batch larger than the limit cannot wait
        # forever for room that will never come.
        if self._pending_bytes and self._pending_bytes + len(payload) > self.max_bytes:
            raise SpoolFull(
                f"spool {self.directory} holds {self.pending_bytes} bytes; "
                f"{len(payload)} more would pass its {self.max_bytes}-byte limit"
            )
        segments = self._segments()
        # With nothing left, continue after the cursor's segment if it was partly read.
        after_cursor = self._cursor[0] + (1 if self._cursor[1] else 0)
        number = segments[-1] if segments else after_cursor
        if segments and self._path(number).stat().st_size >= self._segment_bytes:
            number += 1
        _append_durably(self._path(number), payload)
        self._pending_bytes += len(payload)

    def read_batch(self, max_events: int) -> SpoolBatch:
        """Up to ``max_events`` of the oldest unsent events (nothing is consumed yet)."""
        events: list[dict[str, Any]] = []
        cursors: list[tuple[int, int]] = []
        number, offset = self._cursor
        for segment in self._segments():
            if segment < number:
                continue
            start = offset if segment == number else 0
            with self._path(segment).open("rb") as file:
                file.seek(start)
                position = start
                for line in file:
                    if not line.endswith(b"\n"):
                        break
                    try:
                        events.append(orjson.loads(line))
                    except orjson.JSONDecodeError as exc:
                        raise SpoolCorrupt(
                            f"{self._path(segment)}: the line at byte {position} is not JSON "
                            f"({exc}); move it out of the spool to send what follows it"
                        ) from None
                    position += len(line)
                    cursors.append((segment, position))
                    if len(events) >= max_events:
                        return SpoolBatch(events, cursors)
        return SpoolBatch(events, cursors)

    def commit(self, cursor: tuple[int, int]) -> None:
        """Mark everything up to ``cursor`` (one of a batch's ``cursors``) as stored."""
        self._cursor = cursor
        temporary = self.directory / f"{CURSOR_FILE}.tmp"
        with temporary.open("wb") as file:
            file.write(f"{cursor[0]} {cursor[1]}\n".encode())
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.directory / CURSOR_FILE)
        _fsync_directory(self.directory)
        self._drop_finished()
        self._pending_bytes = self._count_pending()

    def reject(self, event: dict[str, Any], status: int, problem: dict[str, Any]) -> bool:
        """Keep an event the store refused, with its answer, in ``rejected.ndjson``; False
        (nothing written) when that would take the file past ``max_rejected_bytes``."""
        path = self.directory / REJECTED_FILE
        line = orjson.dumps({"status": status, "problem": problem, "event": event}) + b"\n"
        size = path.stat().st_size if path.exists() else 0
        if size + len(line) > self.max_rejected_bytes:
            return False
        _append_durably(path, line)
        return True

    def _segments(self) -> list[int]:
        numbers = []
        for path in self.directory.glob(f"{_PREFIX}*{_SUFFIX}"):
            digits = path.name[len(_PREFIX) : -len(_SUFFIX)]
            if digits.isdigit():
                numbers.append(int(digits))
        return sorted(numbers)

    def _path(self, number: int) -> Path:
        return self.directory / f"{_PREFIX}{number:012d}{_SUFFIX}"

    def _load_cursor(self) -> tuple[int, int]:
        path = self.directory / CURSOR_FILE
        if not path.exists():
            segments = self._segments()
            return (segments[0] if segments else 1, 0)
        number, offset = path.read_text().split()
        return int(number), int(offset)

    def _repair_tail(self) -> None:
        """Cut a torn last line (a crash mid-append) off the newest segment and off the
        file of rejected events, so the next line appended starts a line of its own."""
        segments = self._segments()
        if segments:
            _cut_torn_line(self._path(segments[-1]))
        rejected = self.directory / REJECTED_FILE
        if rejected.exists():
            _cut_torn_line(rejected)

    def _drop_finished(self) -> None:
        number, offset = self._cursor
        segments = self._segments()
        for segment in segments:
            finished = segment < number or (
                segment == number
                and segment != segments[-1]
                and offset >= self._path(segment).stat().st_size
            )
            if finished:
                self._path(segment).unlink()


def _cut_torn_line(path: Path) -> None:
    content = path.read_bytes()
    if content and not content.endswith(b"\n"):
        with path.open("r+b") as file:
            file.truncate(content.rfind(b"\n") + 1)
            file.flush()
            os.fsync(file.fileno())


def _append_durably(path: Path, payload: bytes) -> None:
    """Append ``payload`` to ``path`` and fsync it; on a failure (a full disk, a file
    past its size limit), cut what part of it went in before raising: the next append
    would otherwise follow a half-written line, and every event after it be unreadable.
    Written through the descriptor, unbuffered: a buffered file's truncate writes out its
    buffer first, fails again on the full disk, and the part stayed."""
    is_new = not path.exists()
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.lseek(descriptor, 0, os.SEEK_END)
        try:
            rest = memoryview(payload)
            while rest:
                rest = rest[os.write(descriptor, rest) :]
            os.fsync(descriptor)
        except OSError:
            with contextlib.suppress(OSError):  # the original error is the one to tell
                os.ftruncate(descriptor, size)
                os.fsync(descriptor)
            raise
    finally:
        os.close(descriptor)
    if is_new:
        _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
